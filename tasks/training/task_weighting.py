"""Dynamic task weighting: MT-GRPO's improvement-aware weight update (IWU), pure Python.

Averaging rewards over tasks lets easy tasks that keep improving carry the gradient while a
stagnating task starves (V4.2's push task). IWU moves weight toward the tasks whose mean
reward stopped improving: each logging step the trainer hands in each task's mean reward; the
improvement of a task is the mean of its last `window` rewards minus the mean of the `window`
before; weights are multiplied by exp(-eta * improvement), floored at `min_weight` and
renormalised. The state (weights and reward history) round-trips through a dict, so it is saved
with every checkpoint and restored on resume.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TaskWeighting:
    tasks: tuple[str, ...]
    eta: float = 5.0
    window: int = 5
    min_weight: float = 0.05
    weights: dict[str, float] = field(default_factory=dict)
    history: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.weights:
            self.weights = {task: 1.0 / len(self.tasks) for task in self.tasks}
        for task in self.tasks:
            self.history.setdefault(task, [])

    def improvement(self, task: str) -> float | None:
        rewards = self.history[task]
        if len(rewards) < 2 * self.window:
            return None
        recent = rewards[-self.window :]
        before = rewards[-2 * self.window : -self.window]
        return sum(recent) / self.window - sum(before) / self.window

    def update(self, task_rewards: dict[str, float]) -> dict[str, float]:
        """Record one logging step's mean reward per task (tasks absent this step are skipped)."""
        for task, reward in task_rewards.items():
            if task in self.history and reward is not None and math.isfinite(reward):
                self.history[task].append(float(reward))
                del self.history[task][: -2 * self.window]  # only two windows are ever read
        raw = {}
        for task in self.tasks:
            gain = self.improvement(task)
            raw[task] = self.weights[task] * (
                math.exp(-self.eta * gain) if gain is not None else 1.0
            )
        total = sum(raw.values())
        floored = {task: max(self.min_weight, value / total) for task, value in raw.items()}
        norm = sum(floored.values())
        self.weights = {task: value / norm for task, value in floored.items()}
        return dict(self.weights)

    def multipliers(self) -> dict[str, float]:
        """Weights scaled so that equal weights multiply every reward by 1."""
        return {task: weight * len(self.tasks) for task, weight in self.weights.items()}

    def state_dict(self) -> dict[str, Any]:
        return {
            "tasks": list(self.tasks),
            "eta": self.eta,
            "window": self.window,
            "min_weight": self.min_weight,
            "weights": dict(self.weights),
            "history": {task: list(values) for task, values in self.history.items()},
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> TaskWeighting:
        return cls(
            tasks=tuple(state["tasks"]),
            eta=state["eta"],
            window=state["window"],
            min_weight=state["min_weight"],
            weights=dict(state["weights"]),
            history={task: list(values) for task, values in state["history"].items()},
        )
