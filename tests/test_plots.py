"""The report's plots draw whatever the statistics hand them."""

from tasks.evaluation.plots import start_vs_tuned
from tasks.evaluation.stats import paired_test


def test_a_mean_outside_its_bootstrap_interval_still_plots() -> None:
    # A percentile bootstrap interval need not hold the mean it resamples (rounding alone can
    # put a constant difference outside its own interval); a default run's report failed on it.
    result = paired_test([0.5] * 40, [0.5] * 39 + [0.6])
    above = result.model_copy(update={"ci_high": result.delta - 1e-9})
    below = result.model_copy(update={"ci_low": result.delta + 1e-9})
    png = start_vs_tuned({"sql_qa": above, "insights": below, "overall": result}, "SFT model")
    assert png.startswith(b"\x89PNG")
