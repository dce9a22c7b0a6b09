"""The report's pictures: the start model vs tuned per task with CIs, score distributions,
training curves."""

from __future__ import annotations

import io
from typing import Any

from rewards import TASKS
from tasks.evaluation.stats import PairedTest

START_COLOR, TUNED_COLOR = "#8c8c8c", "#1f77b4"


def _subplots(*args: Any, **kwargs: Any) -> Any:
    """pyplot's figure and axes, drawn to files only (no display on workers or CI). matplotlib
    is imported here, at the first plot: every command imports this module, few of them plot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


def _png(figure: Any) -> bytes:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return buffer.getvalue()


def start_vs_tuned(pooled: dict[str, PairedTest], start: str) -> bytes:
    """Mean score per task of the model GRPO started from (named `start`) and the tuned one;
    the tuned bar's whisker is the 95% CI of the mean difference."""
    tasks = [task for task in (*TASKS, "overall") if task in pooled]
    figure, axis = _subplots(figsize=(7, 3.6))
    positions = range(len(tasks))
    started = [pooled[t].start_mean for t in tasks]
    tuned = [pooled[t].tuned_mean for t in tasks]
    # A percentile bootstrap interval need not contain the mean it resamples (one nonzero pair
    # among many puts the mean above the interval's top): that side of the bar gets no whisker.
    errors = [
        [max(0.0, pooled[t].delta - pooled[t].ci_low) for t in tasks],
        [max(0.0, pooled[t].ci_high - pooled[t].delta) for t in tasks],
    ]
    axis.bar([p - 0.2 for p in positions], started, 0.4, label=start, color=START_COLOR)
    axis.bar([p + 0.2 for p in positions], tuned, 0.4, yerr=errors, capsize=3,
             label="tuned (95% CI of Δ)", color=TUNED_COLOR)  # fmt: skip
    axis.set_xticks(list(positions), tasks)
    axis.set_ylabel("mean reward")
    axis.set_ylim(0, 1)
    axis.legend(loc="upper right", fontsize=8)
    axis.set_title(f"{start} vs GRPO-tuned on the eval split (tuned = mean over seeds)")
    return _png(figure)


def score_distributions(start_rows: list[dict], tuned_rows: list[dict], start: str) -> bytes:
    """Per task, the spread of per-prompt scores, the start model's (named `start`) beside the
    tuned one's."""
    figure, axes = _subplots(1, len(TASKS), figsize=(10, 3.2), sharey=True)
    for axis, task in zip(axes, TASKS, strict=True):
        data = [
            [row["total"] for row in rows if row["task"] == task]
            for rows in (start_rows, tuned_rows)
        ]
        axis.boxplot(data, tick_labels=[start, "tuned"])
        axis.set_title(task, fontsize=9)
    axes[0].set_ylabel("reward per prompt")
    return _png(figure)


def training_curves(histories: dict[int, list[dict[str, Any]]]) -> bytes:
    """Train reward and entropy per step, and held-out eval reward, one line per seed."""
    figure, axes = _subplots(1, 3, figsize=(11, 3.2))
    for seed, history in sorted(histories.items()):
        train = [entry for entry in history if "reward" in entry]
        evals = [entry for entry in history if "eval_reward" in entry]
        axes[0].plot([e["step"] for e in train], [e["reward"] for e in train], label=f"seed {seed}")
        axes[1].plot([e["step"] for e in train], [e.get("entropy") for e in train])
        axes[2].plot([e["step"] for e in evals], [e["eval_reward"] for e in evals], marker="o")
    for axis, title in zip(axes, ("train reward", "entropy", "held-out eval reward"), strict=True):
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("step")
    axes[0].legend(fontsize=7)
    return _png(figure)
