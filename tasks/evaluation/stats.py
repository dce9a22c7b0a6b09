"""Step 5: is the tuned model better? Paired one-sided Wilcoxon signed-rank tests, per task.

Each eval prompt is scored for the start model (the model GRPO starts from: the SFT model, or the
base model without SFT) and for the tuned model of each seed; the pairs are matched by prompt
id. Differences are taken at SCORE_DECIMALS, so float noise is no change; zero
differences are then dropped before ranking (Wilcoxon's own method, scipy's
`zero_method="wilcox"`), and scipy's `method="auto"` chooses the exact null distribution, a
permutation test or the normal approximation; the report records which one was used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from rewards import TASKS

# Two one-sided tests on the same pairs: H1 tuned > start says "better", H1 tuned < start says
# "worse"; a promotion needs the first and must not have the second.
ALTERNATIVES = {"p_better": "greater", "p_worse": "less"}
ZERO_METHOD = "wilcox"
OVERALL = "overall"
# Differences are compared at this many decimals: a reward is a sum of a few dozen terms in
# [0, 1], and the mean of three seeds' equal scores differs from the score by float rounding
# (1e-16), which the signed-rank test would rank as real changes; a real change of one answer
# moves a score by far more (its smallest rule weighs 0.01). Below it, a difference is zero before
# any test, interval or effect size.
SCORE_DECIMALS = 9
# scipy's "auto" switches from the exact distribution to the normal approximation above this n.
EXACT_MAX_N = 50
# ...and, with ties or zeros, uses a complete permutation test up to this n (2**13 outcomes).
PERMUTATION_MAX_N = 13


class _Result(BaseModel):
    # Serialized under report.json's keys (aliases), which stores, artifacts and decision files
    # already hold; built and read in Python by the field names.
    model_config = ConfigDict(frozen=True, validate_by_name=True, serialize_by_alias=True)


class PairedTest(_Result):
    """One start-vs-tuned comparison on prompts paired by id: both one-sided Wilcoxon tests, the
    Holm-adjusted p-values of its family of tasks, and what they are significant for."""

    n: int
    n_nonzero: int
    # Files written before the start model had its name say base_mean.
    start_mean: float = Field(validation_alias=AliasChoices("start_mean", "base_mean"))
    tuned_mean: float
    delta: float
    delta_pct: float | None
    effect_size: float
    ci_low: float
    ci_high: float
    statistic: float
    method: str
    note: str | None = None
    p_better: float | None = Field(alias="p_value")
    p_worse: float | None
    p_better_holm: float | None = Field(alias="p_holm")
    p_worse_holm: float | None
    significant: bool
    significantly_better: bool = Field(alias="significant_holm")
    significantly_worse: bool = Field(alias="significantly_worse_holm")


Verdict = Literal["better", "worse", "not shown better"]


class AcrossSeeds(_Result):
    """One task over the seeds: the spread of the delta and the majority verdict."""

    seeds: int
    delta_mean: float
    delta_std: float
    seeds_significantly_better: int
    seeds_significantly_worse: int
    majority_needed: int
    verdict: Verdict


class Comparison(_Result):
    """Base vs tuned per seed and pooled over seeds, the verdict per task, and how it was done."""

    method: dict[str, str | float]
    pooled: dict[str, PairedTest]
    per_seed: dict[str, dict[str, PairedTest]]
    across_seeds: dict[str, AcrossSeeds]


def settled(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Scores or differences at SCORE_DECIMALS: float noise is zero, near ties are ties."""
    return np.round(values, SCORE_DECIMALS) + 0.0  # + 0.0: no -0.0 left to print


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
    from scipy.stats import rankdata  # imported when used: see signed_rank

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


def _below(p: float | None, alpha: float) -> bool:
    return p is not None and p < alpha


def _holm_fields(
    p_better_holm: float | None, p_worse_holm: float | None, alpha: float
) -> dict[str, Any]:
    """A comparison's Holm-adjusted p-values and the significance they give."""
    return {
        "p_better_holm": p_better_holm,
        "p_worse_holm": p_worse_holm,
        "significantly_better": _below(p_better_holm, alpha),
        "significantly_worse": _below(p_worse_holm, alpha),
    }


def _one_sided_tests(differences: np.ndarray, n_nonzero: int, alpha: float) -> dict[str, Any]:
    """Both one-sided Wilcoxon tests: statistic, scipy's method, p_better, p_worse and, when
    no p is reported, a note saying why."""
    if n_nonzero == 0:
        # scipy returns NaN here; identical scores are no evidence of a change either way.
        return {
            "statistic": 0.0,
            "method": "none: all differences are zero",
            "p_better": 1.0,
            "p_worse": 1.0,
        }
    tests = {key: signed_rank(differences, side) for key, side in ALTERNATIVES.items()}
    described = {
        "statistic": float(tests["p_better"].statistic),
        "method": scipy_auto_method(differences),
    }
    floor = min_attainable_p(n_nonzero)
    if floor >= alpha:
        # A p that cannot fall below alpha whatever the data is not evidence either way.
        return {
            **described,
            "p_better": None,
            "p_worse": None,
            "note": f"{n_nonzero} nonzero pairs cannot reach p < {alpha} "
            f"(smallest attainable one-sided p = {floor:.4f}); no test reported",
        }
    return {**described, **{key: float(test.pvalue) for key, test in tests.items()}}


def signed_rank(differences: np.ndarray, alternative: str) -> Any:
    """The one-sided Wilcoxon signed-rank test of the verdict ("greater": the tuned model
    better), scipy's result: the report's and the power calculation's (benchmarks/eval_power.py)."""
    # Here, not at the top: every command imports this module, and scipy.stats takes longer to
    # import than the rest of the command line.
    from scipy.stats import wilcoxon

    return wilcoxon(differences, alternative=alternative, zero_method=ZERO_METHOD)


def paired_test(start: Sequence[float], tuned: Sequence[float], alpha: float = 0.05) -> PairedTest:
    start_arr, tuned_arr = np.asarray(start, dtype=float), np.asarray(tuned, dtype=float)
    differences = settled(tuned_arr - start_arr)
    start_mean, tuned_mean = float(start_arr.mean()), float(tuned_arr.mean())
    delta = float(differences.mean())
    low, high = bootstrap_ci(differences)
    n_nonzero = int(np.count_nonzero(differences))
    tests = _one_sided_tests(differences, n_nonzero, alpha)
    return PairedTest(
        n=len(differences),
        n_nonzero=n_nonzero,
        start_mean=start_mean,
        tuned_mean=tuned_mean,
        delta=delta,
        delta_pct=100 * delta / start_mean if start_mean else None,
        effect_size=rank_biserial(differences),
        ci_low=low,
        ci_high=high,
        significant=_below(tests["p_better"], alpha),
        # Alone, a test is a family of one, which Holm leaves as it is.
        **_holm_fields(tests["p_better"], tests["p_worse"], alpha),
        **tests,
    )


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
    start_rows: list[dict[str, Any]], tuned_rows: list[dict[str, Any]], alpha: float
) -> dict[str, PairedTest]:
    """Per task and overall, start vs tuned paired by prompt id; Holm across the tasks."""
    tuned_by_id = {row["prompt_id"]: row for row in tuned_rows}
    missing = [row["prompt_id"] for row in start_rows if row["prompt_id"] not in tuned_by_id]
    if missing:
        raise ValueError(f"{len(missing)} eval prompts have no tuned score, e.g. {missing[:3]}")
    out: dict[str, PairedTest] = {}
    for task in (*TASKS, OVERALL):
        pairs = [
            (row["total"], tuned_by_id[row["prompt_id"]]["total"])
            for row in start_rows
            if task == OVERALL or row["task"] == task
        ]
        if not pairs:
            continue
        out[task] = paired_test([b for b, _ in pairs], [t for _, t in pairs], alpha)
    tasks_tested = [task for task in TASKS if task in out]
    better = holm({task: out[task].p_better for task in tasks_tested})
    worse = holm({task: out[task].p_worse for task in tasks_tested})
    # overall is one test, no family: it keeps its raw p-values.
    return {
        task: result.model_copy(
            update=_holm_fields(
                better.get(task, result.p_better), worse.get(task, result.p_worse), alpha
            )
        )
        for task, result in out.items()
    }


def across_seeds(
    per_seed: dict[str, dict[str, PairedTest]], majority: int
) -> dict[str, AcrossSeeds]:
    """Per task: the delta's mean and std over seeds, and a verdict: "better" (or "worse") needs
    a Holm-corrected significant improvement (or regression) in at least `majority` seeds."""
    summary: dict[str, AcrossSeeds] = {}
    for task in (*TASKS, OVERALL):
        results = [seed_results[task] for seed_results in per_seed.values() if task in seed_results]
        if not results:
            continue
        deltas = np.array([r.delta for r in results])
        improved = sum(1 for r in results if r.significantly_better and r.delta > 0)
        worsened = sum(1 for r in results if r.significantly_worse and r.delta < 0)
        summary[task] = AcrossSeeds(
            seeds=len(results),
            delta_mean=float(deltas.mean()),
            delta_std=float(deltas.std(ddof=1)) if len(deltas) > 1 else 0.0,
            seeds_significantly_better=improved,
            seeds_significantly_worse=worsened,
            majority_needed=majority,
            verdict="better"
            if improved >= majority
            else "worse"
            if worsened >= majority
            else "not shown better",
        )
    return summary


def seed_average(rows_by_seed: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per prompt whose total is the mean over seeds: the pooled tuned model."""
    seeds = sorted(rows_by_seed)
    by_id = [{row["prompt_id"]: row for row in rows_by_seed[seed]} for seed in seeds]
    return [
        {**row, "total": float(np.mean([rows[row["prompt_id"]]["total"] for rows in by_id]))}
        for row in rows_by_seed[seeds[0]]
    ]


def compare(
    start_rows: list[dict[str, Any]],
    rows_by_seed: dict[int, list[dict[str, Any]]],
    alpha: float,
    majority: int | None = None,
) -> Comparison:
    majority = majority or len(rows_by_seed) // 2 + 1
    per_seed = {
        str(seed): compare_rows(start_rows, rows, alpha) for seed, rows in rows_by_seed.items()
    }
    return Comparison(
        method={
            "test": "Wilcoxon signed-rank, paired by prompt id, one-sided both ways "
            "(p: tuned > start; p_worse: tuned < start)",
            "zero_method": f"{ZERO_METHOD} (zero differences dropped before ranking; differences "
            f"taken at {SCORE_DECIMALS} decimals, so float noise is zero)",
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
        pooled=compare_rows(start_rows, seed_average(rows_by_seed), alpha),
        per_seed=per_seed,
        across_seeds=across_seeds(per_seed, majority),
    )
