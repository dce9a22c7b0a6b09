"""MT-GRPO's improvement-aware task weighting: stagnating tasks gain weight; state round-trips."""

import math

import pytest

from tasks.training.task_weighting import TaskWeighting

TASKS = ("extraction", "sql_qa", "insights", "push")


def test_starts_uniform_and_moves_toward_the_stagnating_task() -> None:
    weighting = TaskWeighting(TASKS, eta=5.0, window=3)
    assert weighting.multipliers() == {task: pytest.approx(1.0) for task in TASKS}
    for step in range(12):
        weighting.update(
            {
                "extraction": 0.1 + 0.05 * step,
                "sql_qa": 0.4,
                "insights": 0.3 + 0.02 * step,
                "push": 0.2,
            }
        )
    weights = weighting.weights
    assert sum(weights.values()) == pytest.approx(1.0)
    assert weights["sql_qa"] == pytest.approx(weights["push"])  # both flat
    assert weights["push"] > weights["insights"] > weights["extraction"]  # faster gain, less weight


def test_no_update_before_two_windows_and_missing_tasks_are_skipped() -> None:
    weighting = TaskWeighting(TASKS, window=5)
    for _ in range(9):
        weighting.update({"extraction": 1.0, "push": float("nan")})
    assert weighting.weights == {task: 0.25 for task in TASKS}
    assert weighting.history["push"] == [] and len(weighting.history["sql_qa"]) == 0


def test_weights_keep_a_floor() -> None:
    weighting = TaskWeighting(TASKS, eta=50.0, window=1, min_weight=0.05)
    for step in range(30):
        weighting.update({"extraction": float(step), "sql_qa": 0.0, "insights": 0.0, "push": 0.0})
    assert min(weighting.weights.values()) > 0.04


def test_state_round_trips_and_continues_identically() -> None:
    first = TaskWeighting(TASKS, window=2)
    for step in range(6):
        first.update({task: math.sin(step + i) for i, task in enumerate(TASKS)})
    second = TaskWeighting.from_state_dict(first.state_dict())
    for step in range(6, 10):
        rewards = {task: math.cos(step + i) for i, task in enumerate(TASKS)}
        assert first.update(rewards) == second.update(rewards)
