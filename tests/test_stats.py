"""The Wilcoxon comparison against hand-computed cases and an oracle of its own: the exact
null distribution by enumerating every assignment of signs to the ranks."""

import itertools
from fractions import Fraction

import numpy as np
import pytest

from tasks.evaluation.report import results_table
from tasks.evaluation.stats import (
    OVERALL,
    PairedTest,
    bootstrap_ci,
    compare,
    compare_rows,
    holm,
    paired_test,
    rank_biserial,
    scipy_auto_method,
    seed_average,
)


def _rows(scores: dict[str, list[float]]) -> list[dict]:
    return [
        {"prompt_id": f"{task}-{i}", "task": task, "total": total}
        for task, totals in scores.items()
        for i, total in enumerate(totals)
    ]


def test_a_clear_improvement_is_detected() -> None:
    # Ten prompts, every one better: W+ = 1+...+10 = 55, exact one-sided p = 1/2**10.
    result = paired_test(
        [0.1 * i for i in range(10)], [0.1 * i + 0.05 * (i + 1) for i in range(10)]
    )
    assert result.statistic == 55.0
    assert result.p_better == pytest.approx(1 / 1024)
    assert result.method == "exact"
    assert result.delta == pytest.approx(0.275)


def test_identical_models_are_not_significant() -> None:
    result = paired_test([0.3, 0.5, 0.7], [0.3, 0.5, 0.7])
    assert (result.p_better, result.p_worse, result.n_nonzero) == (1.0, 1.0, 0)
    assert "all differences are zero" in result.method


def test_a_regression_is_reported_as_one() -> None:
    result = paired_test([0.8] * 8, [0.8 - 0.01 * (i + 1) for i in range(8)])
    assert result.delta < 0
    assert result.p_better == pytest.approx(1.0)  # not better...
    assert result.p_worse == pytest.approx(1 / 2**8)  # ...and every pair worse: exact p
    rows = _rows({"push": [0.8] * 8})
    worse = _rows({"push": [0.8 - 0.01 * (i + 1) for i in range(8)]})
    comparison = compare(rows, {1: worse, 2: worse, 3: rows}, alpha=0.05)
    assert comparison.pooled["push"].significantly_worse
    assert not comparison.pooled["push"].significantly_better
    assert comparison.across_seeds["push"].seeds_significantly_worse == 2
    assert comparison.across_seeds["push"].verdict == "worse"


def mid_ranks(values: list[float]) -> list[Fraction]:
    """1-based ranks, each run of equal values sharing the mean of its places."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [Fraction(0)] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for place in range(start, end + 1):
            ranks[order[place]] = Fraction(start + end + 2, 2)
        start = end + 1
    return ranks


def enumerated(differences: list[Fraction]) -> tuple[Fraction, Fraction, Fraction]:
    """(W+, P(W+ >= observed), P(W+ <= observed)) under H0, zeros dropped: each of the 2**n
    sign assignments to the ranks of |d| is equally likely."""
    nonzero = [d for d in differences if d != 0]
    ranks = mid_ranks([abs(d) for d in nonzero])
    observed = sum((r for r, d in zip(ranks, nonzero, strict=True) if d > 0), Fraction(0))
    sums = [
        sum((r for r, sign in zip(ranks, signs, strict=True) if sign), Fraction(0))
        for signs in itertools.product((False, True), repeat=len(nonzero))
    ]
    total = len(sums)
    return (
        observed,
        Fraction(sum(w >= observed for w in sums), total),
        Fraction(sum(w <= observed for w in sums), total),
    )


@pytest.mark.parametrize(
    ("base", "tuned"),
    [
        # one zero, tied |d| = 0.1 three times: the permutation method
        ([5, 5, 5, 5, 5, 5], [5, 6, 6, 7, 4, 8]),
        # no ties, no zeros: the exact method
        ([1, 2, 3, 4, 5, 6, 7, 8], [2, 1, 6, 8, 4, 12, 14, 16]),
        # mostly worse, ties across signs
        ([3, 3, 3, 3, 3, 3, 3, 3, 3], [2, 2, 1, 4, 3, 1, 0, 2, 5]),
        # a mixed case at the largest n the enumeration oracle takes quickly
        (list(range(12)), [i + (-1) ** i * (i % 4 + 1) for i in range(12)]),
    ],
)
def test_p_values_are_the_enumerated_null_distribution(base: list[int], tuned: list[int]) -> None:
    """Scores in tenths, so that the oracle's differences are exact fractions."""
    statistic, p_better, p_worse = enumerated(
        [Fraction(t - b, 10) for b, t in zip(base, tuned, strict=True)]
    )
    result = paired_test([b / 10 for b in base], [t / 10 for t in tuned])
    assert result.statistic == pytest.approx(float(statistic))
    assert result.p_better == pytest.approx(float(p_better))
    assert result.p_worse == pytest.approx(float(p_worse))
    assert result.n_nonzero == sum(b != t for b, t in zip(base, tuned, strict=True))


def test_float_noise_is_no_change() -> None:
    """Seeds that all kept their start answer every prompt as the base did; the mean of their
    three equal scores differs from the score by float rounding on some prompts, which the test
    would rank as real differences (a report once called push better, Holm p 0.0054, r +1.00)."""
    totals = {
        "extraction": [0.1, 0.7, 0.2 + 0.1, 0.646, 0.35, 0.9, 0.1 * 3, 0.55, 0.61, 0.12],
        "sql_qa": [0.3 + 0.6, 0.45, 0.125, 0.7, 0.1, 0.2, 0.3, 0.85, 0.05, 0.4],
        "insights": [0.579, 0.524, 0.7, 0.8 - 0.1, 0.33, 0.66, 0.99, 0.42, 0.58, 0.61],
        "push": [0.1 + 0.2, 0.95, 0.6, 0.85, 0.35, 0.7, 0.1, 0.45, 0.8, 0.65],
    }
    base = _rows(totals)
    kept = {seed: _rows(totals) for seed in (42, 123, 456)}
    pooled = seed_average(kept)
    assert any(row["total"] != b["total"] for row, b in zip(pooled, base, strict=True)), (
        "the pooled scores carry float noise, or this test tests nothing"
    )
    comparison = compare(base, kept, alpha=0.05)
    for results in (comparison.pooled, *comparison.per_seed.values()):
        for row in results_table(results):
            assert row["change"] == "none", row
            assert (row["delta"], row["effect_size"], row["ci95"]) == (0.0, 0.0, "[+0.000, +0.000]")
        assert all(r.n_nonzero == 0 and r.p_better == 1.0 for r in results.values())
    assert {s.verdict for s in comparison.across_seeds.values()} == {"not shown better"}
    assert {s.delta_mean for s in comparison.across_seeds.values()} == {0.0}


def test_method_follows_scipy_auto() -> None:
    assert scipy_auto_method(np.arange(1, 11, dtype=float)) == "exact"
    assert scipy_auto_method(np.arange(1, 61, dtype=float)) == "asymptotic"
    assert scipy_auto_method(np.array([1.0, 1.0] * 10)) == "asymptotic"


def test_per_task_and_overall_pairing_by_prompt_id() -> None:
    base = _rows({"extraction": [0.1, 0.2, 0.3], "push": [0.5, 0.5]})
    tuned = list(reversed(_rows({"extraction": [0.4, 0.5, 0.6], "push": [0.5, 0.5]})))
    results = compare_rows(base, tuned, alpha=0.05)
    assert results["extraction"].delta == pytest.approx(0.3)
    assert results["push"].delta == pytest.approx(0.0)
    assert results[OVERALL].n == 5
    assert "sql_qa" not in results


def test_pooled_uses_the_mean_over_seeds() -> None:
    base = _rows({"push": [0.2, 0.2]})
    report = compare(
        base, {1: _rows({"push": [0.4, 0.2]}), 2: _rows({"push": [0.2, 0.6]})}, alpha=0.05
    )
    assert report.pooled["push"].tuned_mean == pytest.approx(0.35)
    assert set(report.per_seed) == {"1", "2"}


def test_missing_tuned_scores_are_an_error() -> None:
    with pytest.raises(ValueError, match="no tuned score"):
        compare_rows(_rows({"push": [0.1, 0.2]}), _rows({"push": [0.1]}), alpha=0.05)


def test_rank_biserial_by_hand() -> None:
    # |d| ranks 1, 2, 3, 4; W+ = 1 + 2 + 3 = 6, W- = 4: r = (6 - 4) / 10.
    assert rank_biserial(np.array([0.1, 0.2, 0.3, -0.4, 0.0])) == pytest.approx(0.2)
    assert rank_biserial(np.array([0.5, 0.1])) == 1.0
    assert rank_biserial(np.zeros(3)) == 0.0


def test_bootstrap_interval_is_seeded_and_brackets_the_mean() -> None:
    differences = np.array([0.1, 0.3, -0.1, 0.2, 0.05, 0.15, 0.0, 0.25])
    low, high = bootstrap_ci(differences)
    assert low < differences.mean() < high
    assert (low, high) == bootstrap_ci(differences)  # same seed, same interval
    assert bootstrap_ci(np.full(5, 0.2)) == pytest.approx((0.2, 0.2))


def test_holm_by_hand() -> None:
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.2, "e": None})
    # sorted 0.01, 0.03, 0.04, 0.20 times 4, 3, 2, 1 -> 0.04, 0.09, 0.08 -> 0.09 (monotone), 0.20
    assert adjusted == pytest.approx({"a": 0.04, "c": 0.09, "b": 0.09, "d": 0.2, "e": None})


def test_too_few_pairs_get_a_note_not_a_meaningless_p() -> None:
    result = paired_test([0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8], alpha=0.05)
    assert result.p_better is None and "cannot reach p < 0.05" in result.note
    assert result.effect_size == 1.0  # the direction is still reported
    assert paired_test([0.1] * 5, [0.2 + 0.01 * i for i in range(5)]).p_better == pytest.approx(
        1 / 32
    )


def test_verdict_needs_a_majority_of_seeds_and_holm() -> None:
    better = _rows({"push": [0.1 * i for i in range(10)]})
    improved = _rows({"push": [0.1 * i + 0.05 * (i + 1) for i in range(10)]})
    same = _rows({"push": [0.1 * i for i in range(10)]})
    two_of_three = compare(better, {1: improved, 2: improved, 3: same}, alpha=0.05)
    assert two_of_three.across_seeds["push"].verdict == "better"
    assert two_of_three.across_seeds["push"].seeds_significantly_better == 2
    one_of_three = compare(better, {1: improved, 2: same, 3: same}, alpha=0.05)
    assert one_of_three.across_seeds["push"].verdict == "not shown better"
    assert one_of_three.across_seeds["push"].delta_std > 0
    strict = compare(better, {1: improved, 2: improved, 3: same}, alpha=0.05, majority=3)
    assert strict.across_seeds["push"].verdict == "not shown better"


def test_a_comparison_written_before_the_start_model_was_named_still_reads() -> None:
    """Decision files and reports in a store say `base_mean` for what is now `start_mean`: both
    read, and what is written says `start_mean`."""
    written = paired_test([0.2] * 8, [0.3] * 8).model_dump()
    assert "start_mean" in written and "base_mean" not in written
    older = {("base_mean" if key == "start_mean" else key): value for key, value in written.items()}
    assert PairedTest.model_validate(older).start_mean == pytest.approx(0.2)
    assert PairedTest.model_validate(written) == PairedTest.model_validate(older)
