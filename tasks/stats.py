"""Step 5: is the tuned model better? Paired one-sided Wilcoxon signed-rank tests, per task.

Each eval prompt is scored for the base model and for the tuned model of each seed; the pairs are
matched by prompt id. Zero differences are dropped before ranking (Wilcoxon's own method, scipy's
`zero_method="wilcox"`), and scipy's `method="auto"` chooses the exact null distribution, a
permutation test or the normal approximation; the report records which one was used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import wilcoxon

from configs.recipe import TASKS

ALTERNATIVE = "greater"  # H1: tuned > base
ZERO_METHOD = "wilcox"
OVERALL = "overall"
# scipy's "auto" switches from the exact distribution to the normal approximation above this n.
EXACT_MAX_N = 50
# ...and, with ties or zeros, uses a complete permutation test up to this n (2**13 outcomes).
PERMUTATION_MAX_N = 13


def scipy_auto_method(differences: np.ndarray) -> str:
    """The test scipy's wilcoxon(method="auto") runs on these differences (scipy >= 1.15)."""
    nonzero = differences[differences != 0]
    has_ties = len(np.unique(np.abs(nonzero))) < len(nonzero)
    has_zeros = len(nonzero) < len(differences)
    if len(differences) > EXACT_MAX_N:
        return "asymptotic"
    if not (has_ties or has_zeros):
        return "exact"
    return "permutation" if len(differences) <= PERMUTATION_MAX_N else "asymptotic"


def paired_test(base: Sequence[float], tuned: Sequence[float]) -> dict[str, Any]:
    base_arr, tuned_arr = np.asarray(base, dtype=float), np.asarray(tuned, dtype=float)
    differences = tuned_arr - base_arr
    base_mean, tuned_mean = float(base_arr.mean()), float(tuned_arr.mean())
    result: dict[str, Any] = {
        "n": len(differences),
        "n_nonzero": int(np.count_nonzero(differences)),
        "base_mean": base_mean,
        "tuned_mean": tuned_mean,
        "delta": tuned_mean - base_mean,
        "delta_pct": 100 * (tuned_mean - base_mean) / base_mean if base_mean else None,
    }
    if result["n_nonzero"] == 0:
        # scipy returns NaN here; identical scores are no evidence of improvement.
        result.update(statistic=0.0, p_value=1.0, method="none: all differences are zero")
        return result
    test = wilcoxon(tuned_arr, base_arr, alternative=ALTERNATIVE, zero_method=ZERO_METHOD)
    result.update(
        statistic=float(test.statistic),
        p_value=float(test.pvalue),
        method=scipy_auto_method(differences),
    )
    return result


def compare_rows(
    base_rows: list[dict[str, Any]], tuned_rows: list[dict[str, Any]], alpha: float
) -> dict[str, dict[str, Any]]:
    """Per task and overall, base vs tuned paired by prompt id."""
    tuned_by_id = {row["prompt_id"]: row for row in tuned_rows}
    missing = [row["prompt_id"] for row in base_rows if row["prompt_id"] not in tuned_by_id]
    if missing:
        raise ValueError(f"{len(missing)} eval prompts have no tuned score, e.g. {missing[:3]}")
    out: dict[str, dict[str, Any]] = {}
    for task in (*TASKS, OVERALL):
        pairs = [
            (row["total"], tuned_by_id[row["prompt_id"]]["total"])
            for row in base_rows
            if task == OVERALL or row["task"] == task
        ]
        if not pairs:
            continue
        test = paired_test([b for b, _ in pairs], [t for _, t in pairs])
        test["significant"] = test["p_value"] < alpha
        out[task] = test
    return out


def seed_average(rows_by_seed: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per prompt whose total is the mean over seeds: the pooled tuned model."""
    seeds = sorted(rows_by_seed)
    by_id = [{row["prompt_id"]: row for row in rows_by_seed[seed]} for seed in seeds]
    return [
        {**row, "total": float(np.mean([rows[row["prompt_id"]]["total"] for rows in by_id]))}
        for row in rows_by_seed[seeds[0]]
    ]


def compare(
    base_rows: list[dict[str, Any]], rows_by_seed: dict[int, list[dict[str, Any]]], alpha: float
) -> dict[str, Any]:
    return {
        "method": {
            "test": "Wilcoxon signed-rank, paired by prompt id, one-sided (tuned > base)",
            "zero_method": ZERO_METHOD,
            "scipy_method": "auto (per test: see each result's 'method')",
            "alpha": alpha,
            "pooled": "tuned score of a prompt = mean over seeds",
        },
        "pooled": compare_rows(base_rows, seed_average(rows_by_seed), alpha),
        "per_seed": {
            str(seed): compare_rows(base_rows, rows, alpha) for seed, rows in rows_by_seed.items()
        },
    }
