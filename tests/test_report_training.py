"""The report's "Training per seed" rows and table, against hand-made log histories."""

from __future__ import annotations

import pytest

from tasks.core.manifests import Adapter
from tasks.evaluation.eval_summary import generation_summary
from tasks.evaluation.report import _training_table, render_markdown, training_summary
from tasks.evaluation.stats import compare


def _adapter(seed: int, global_step: int, best_step=None, best_reward=None, reason=None):
    return Adapter(
        fingerprint=f"fp{seed}",
        seed=seed,
        run_key=f"run{seed}",
        folder=f"runs/{seed}",
        log_history=f"runs/{seed}/log_history.json",
        global_step=global_step,
        best_step=best_step,
        best_eval_reward=best_reward,
        stop_reason=reason,
    )


def _train(step: int, tied: float | None) -> dict:
    entry = {"step": step, "reward": 0.5, "reward_std": 0.1}
    return entry if tied is None else {**entry, "frac_reward_zero_std": tied}


def _eval(step: int, reward: float, truncated: float | None = None) -> dict:
    entry = {"step": step, "eval_reward": reward, "eval_entropy": 1.0}
    return entry if truncated is None else {**entry, "eval_completions/clipped_ratio": truncated}


STOP = "early stopping: no eval-reward gain over 0.6000 (step 4) in 2 evals"

CASES = [
    pytest.param(
        _adapter(1, 8, best_step=4, best_reward=0.6, reason=STOP),
        # logged out of step order on purpose; step 0 eval present
        [_eval(0, 0.4, 0.0), *(_train(s, t) for s, t in [(2, 0.5), (1, 0.25), (3, 0.5), (4, 0.75)]),
         _eval(4, 0.6, 0.125), *(_train(s, 1.0) for s in range(5, 9)), _eval(8, 0.55, 0.5)],
        {"tied_groups_logged_steps": 8, "tied_groups_mean": 0.75,
         "tied_groups_first_quarter": 0.375, "tied_groups_last_quarter": 1.0,
         "start_eval_step": 0, "start_eval_reward": 0.4, "start_eval_truncated": 0.0,
         "chosen_step": 4, "chosen_eval_reward": 0.6, "chosen_eval_truncated": 0.125,
         "exported": "best", "stop_reason": STOP},
        f"| 1 | 8 | 0.750 (0.375 → 1.000) | 0.400 (step 0, 0% cut) | 0.600 (step 4, 12% cut) "
        f"| {STOP} |",
        id="step-0 eval and a best step",
    ),
    pytest.param(
        _adapter(2, 3, reason="max_steps reached"),
        [_train(1, 0.0), _train(2, 0.5), _train(3, 0.25), _eval(3, 0.3), _eval(2, 0.2)],
        {"tied_groups_logged_steps": 3, "tied_groups_mean": 0.25,
         "start_eval_step": 2, "start_eval_reward": 0.2, "start_eval_truncated": None,
         "chosen_step": None, "chosen_eval_reward": None, "chosen_eval_truncated": None,
         "exported": "final"},
        "| 2 | 3 | 0.250 (0.000 → 0.250) | 0.200 (step 2) | n/a (final adapter exported) "
        "| max_steps reached |",
        id="first eval at a later step, best_step None",
    ),
    pytest.param(
        _adapter(3, 2),
        [_train(1, None), _train(2, None), {"step": 2, "train_runtime": 1.0}],
        {"tied_groups_logged_steps": 0, "tied_groups_mean": None,
         "tied_groups_first_quarter": None, "tied_groups_last_quarter": None,
         "start_eval_step": None, "start_eval_reward": None, "stop_reason": None},
        "| 3 | 2 | n/a | n/a (no eval logged) | n/a (final adapter exported) | n/a |",
        id="no frac_reward_zero_std and no eval",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("adapter", "history", "expected", "line"), CASES)
def test_training_rows_and_table_line(adapter, history, expected, line) -> None:
    [row] = training_summary([adapter], {adapter.seed: history})
    assert row["seed"] == adapter.seed and row["global_step"] == adapter.global_step
    for key, value in expected.items():
        assert row[key] == pytest.approx(value) if isinstance(value, float) else row[key] == value
    assert _training_table([row]).splitlines()[2] == line


def test_rows_are_sorted_by_seed_and_a_pipe_in_the_stop_reason_cannot_break_the_table() -> None:
    adapters = [_adapter(2, 1, reason="a | b"), _adapter(1, 1)]
    rows = training_summary(adapters, {})  # a seed without history: every statistic n/a
    assert [r["seed"] for r in rows] == [1, 2]
    assert _training_table(rows).splitlines()[3].endswith("| a \\| b |")


def _minimal_report(**extra) -> dict:
    base = [{"prompt_id": str(i), "task": "push", "total": 0.1 * i, "tokens": 5,
             "truncated": False, "completion": "x"} for i in range(6)]  # fmt: skip
    tuned = [{**row, "total": row["total"] + 0.05} for row in base]
    return {
        "recipe": "unit",
        "start_model": {"location": "tiny", "source": "sft"},
        "seeds": [1],
        "eval_prompts": len(base),
        "eval_temperature": 0.0,
        "config_fingerprint": "cfg",
        "data_fingerprint": "d" * 20,
        "git_commit": None,
        "comparison": compare(base, {1: tuned}, 0.05),
        "generation": generation_summary({"SFT model": base, "seed 1": tuned}),
        "worst_regressions": [],
        **extra,
    }


def test_the_training_section_sits_after_the_seed_tables_and_is_optional() -> None:
    row = training_summary([_adapter(1, 2)], {1: [_train(1, 0.5), _eval(0, 0.1)]})
    markdown = render_markdown(_minimal_report(training=row, sft=None))
    assert markdown.index("## Seed 1") < markdown.index("## Training per seed")
    assert markdown.index("## Training per seed") < markdown.index("## Plots")
    for report in (_minimal_report(), _minimal_report(training=[])):  # e.g. older report.json
        assert "## Training per seed" not in render_markdown(report)
