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
from scipy.stats import rankdata, wilcoxon

from configs.recipe import TASKS

# Two one-sided tests on the same pairs: H1 tuned > base says "better", H1 tuned < base says
# "worse"; a promotion needs the first and must not have the second.
ALTERNATIVES = {"p_value": "greater", "p_worse": "less"}
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


def rank_biserial(differences: np.ndarray) -> float:
    """Matched-pairs rank-biserial correlation: (W+ - W-) / (W+ + W-), zeros dropped as in the
    test; +1 when every nonzero pair improved, -1 when every one got worse."""
    nonzero = differences[differences != 0]
    if len(nonzero) == 0:
        return 0.0
    ranks = rankdata(np.abs(nonzero))
    positive, negative = ranks[nonzero > 0].sum(), ranks[nonzero < 0].sum()
    return float((positive - negative) / (positive + negative))


def bootstrap_ci(
    differences: np.ndarray, level: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean difference (pairs resampled, seeded)."""
    rng = np.random.default_rng(seed)
    means = rng.choice(differences, size=(resamples, len(differences))).mean(axis=1)
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def min_attainable_p(n_nonzero: int) -> float:
    """The smallest one-sided p any Wilcoxon test of n nonzero pairs can give: all improved."""
    return 0.5**n_nonzero


def paired_test(
    base: Sequence[float], tuned: Sequence[float], alpha: float = 0.05
) -> dict[str, Any]:
    base_arr, tuned_arr = np.asarray(base, dtype=float), np.asarray(tuned, dtype=float)
    differences = tuned_arr - base_arr
    base_mean, tuned_mean = float(base_arr.mean()), float(tuned_arr.mean())
    low, high = bootstrap_ci(differences)
    result: dict[str, Any] = {
        "n": len(differences),
        "n_nonzero": int(np.count_nonzero(differences)),
        "base_mean": base_mean,
        "tuned_mean": tuned_mean,
        "delta": tuned_mean - base_mean,
        "delta_pct": 100 * (tuned_mean - base_mean) / base_mean if base_mean else None,
        "effect_size": rank_biserial(differences),
        "ci_low": low,
        "ci_high": high,
        "note": None,
    }
    if result["n_nonzero"] == 0:
        # scipy returns NaN here; identical scores are no evidence of a change either way.
        result.update(
            statistic=0.0, p_value=1.0, p_worse=1.0, method="none: all differences are zero"
        )
        return result
    tests = {
        key: wilcoxon(tuned_arr, base_arr, alternative=alternative, zero_method=ZERO_METHOD)
        for key, alternative in ALTERNATIVES.items()
    }
    result.update(
        statistic=float(tests["p_value"].statistic), method=scipy_auto_method(differences)
    )
    floor = min_attainable_p(result["n_nonzero"])
    if floor >= alpha:
        # A p that cannot fall below alpha whatever the data is not evidence either way.
        result.update(
            p_value=None,
            p_worse=None,
            note=f"{result['n_nonzero']} nonzero pairs cannot reach p < {alpha} "
            f"(smallest attainable one-sided p = {floor:.4f}); no test reported",
        )
    else:
        result.update({key: float(test.pvalue) for key, test in tests.items()})
    return result


def holm(p_values: dict[str, float | None]) -> dict[str, float | None]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone); None stays None."""
    tested = sorted((p, name) for name, p in p_values.items() if p is not None)
    adjusted: dict[str, float | None] = dict.fromkeys(p_values)
    running = 0.0
    for rank, (p, name) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[name] = running
    return adjusted


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
        out[task] = paired_test([b for b, _ in pairs], [t for _, t in pairs], alpha)
    for raw, corrected, flag in (
        ("p_value", "p_holm", "significant_holm"),
        ("p_worse", "p_worse_holm", "significantly_worse_holm"),
    ):
        adjusted = holm({task: out[task][raw] for task in TASKS if task in out})
        for task, result in out.items():
            result[corrected] = adjusted.get(task, result[raw])  # overall: one test, no family
            result[flag] = result[corrected] is not None and result[corrected] < alpha
    for result in out.values():
        result["significant"] = result["p_value"] is not None and result["p_value"] < alpha
    return out


def across_seeds(
    per_seed: dict[str, dict[str, dict[str, Any]]], majority: int
) -> dict[str, dict[str, Any]]:
    """Per task: the delta's mean and std over seeds, and a verdict: "better" (or "worse") needs
    a Holm-corrected significant improvement (or regression) in at least `majority` seeds."""
    summary: dict[str, dict[str, Any]] = {}
    for task in (*TASKS, OVERALL):
        results = [seed_results[task] for seed_results in per_seed.values() if task in seed_results]
        if not results:
            continue
        deltas = np.array([r["delta"] for r in results])
        improved = sum(1 for r in results if r["significant_holm"] and r["delta"] > 0)
        worsened = sum(1 for r in results if r["significantly_worse_holm"] and r["delta"] < 0)
        summary[task] = {
            "seeds": len(results),
            "delta_mean": float(deltas.mean()),
            "delta_std": float(deltas.std(ddof=1)) if len(deltas) > 1 else 0.0,
            "seeds_significantly_better": improved,
            "seeds_significantly_worse": worsened,
            "majority_needed": majority,
            "verdict": "better"
            if improved >= majority
            else "worse"
            if worsened >= majority
            else "not shown better",
        }
    return summary


class LeakageError(ValueError):
    """The eval split shares prompts with the train split: no comparison is meaningful."""


def assert_no_overlap(train_rows: list[dict[str, Any]], eval_rows: list[dict[str, Any]]) -> None:
    """Refuse to compare when an eval prompt (by id or by its messages) was also trained on."""
    train_ids = {row["prompt_id"] for row in train_rows}
    train_texts = {repr(row["prompt"]) for row in train_rows}
    leaked = [
        row["prompt_id"]
        for row in eval_rows
        if row["prompt_id"] in train_ids or repr(row["prompt"]) in train_texts
    ]
    if leaked:
        raise LeakageError(
            f"{len(leaked)} eval prompts are also train prompts (e.g. {leaked[:3]}); "
            "a comparison on them would measure memory, not improvement"
        )


def seed_average(rows_by_seed: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per prompt whose total is the mean over seeds: the pooled tuned model."""
    seeds = sorted(rows_by_seed)
    by_id = [{row["prompt_id"]: row for row in rows_by_seed[seed]} for seed in seeds]
    return [
        {**row, "total": float(np.mean([rows[row["prompt_id"]]["total"] for rows in by_id]))}
        for row in rows_by_seed[seeds[0]]
    ]


def compare(
    base_rows: list[dict[str, Any]],
    rows_by_seed: dict[int, list[dict[str, Any]]],
    alpha: float,
    majority: int | None = None,
) -> dict[str, Any]:
    majority = majority or len(rows_by_seed) // 2 + 1
    per_seed = {
        str(seed): compare_rows(base_rows, rows, alpha) for seed, rows in rows_by_seed.items()
    }
    return {
        "method": {
            "test": "Wilcoxon signed-rank, paired by prompt id, one-sided both ways "
            "(p: tuned > base; p_worse: tuned < base)",
            "zero_method": f"{ZERO_METHOD} (zero differences dropped before ranking)",
            "scipy_method": "auto (per test: see each result's 'method')",
            "alpha": alpha,
            "multiple_testing": "Holm across the four tasks, for each direction (p_holm, "
            "p_worse_holm), raw p beside it",
            "effect_size": "matched-pairs rank-biserial correlation",
            "ci": "95% percentile bootstrap of the mean difference, 10,000 resamples, seed 0",
            "pooled": "tuned score of a prompt = mean over seeds",
            "verdict": f"better (worse) when Holm-significant and positive (negative) in "
            f">= {majority} of {len(rows_by_seed)} seeds",
        },
        "pooled": compare_rows(base_rows, seed_average(rows_by_seed), alpha),
        "per_seed": per_seed,
        "across_seeds": across_seeds(per_seed, majority),
    }
