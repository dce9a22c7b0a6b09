"""The tasks a run does not train, answered at every held-out eval: a step that makes one worse
is not kept.

A LoRA adapter on every linear layer changes what the model writes for every task, not only the
ones its rewards see: a step chosen for a gain on the trained task can make another task
significantly worse on the eval split, one its held-out prompts never ask (CHANGELOG.md, "The
runs behind the training code"). With `untrained_heldout_prompts`
set, each held-out eval also answers that many train prompts of each task the run leaves alone,
as evaluation answers (its generation and scoring code, `heldout_temperature`, the same draws at
every eval, from a random stream of its own so training's is untouched), and logs each task's mean
reward as `eval_untrained/<task>`; the stop rules keep no step whose mean on one of them falls
more than `max_untrained_drop` below the start's (stopping.py).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from configs.recipe import EvalConfig, TrainingConfig
from tasks.generation.answering import generate, score_row

UNTRAINED_PREFIX = "eval_untrained/"


def untrained_rows(rows: list[dict[str, Any]], training: TrainingConfig) -> list[dict[str, Any]]:
    """Of each task `training` leaves alone, the train file's last `untrained_heldout_prompts`
    prompts (the file is shuffled), in the file's order."""
    taken: Counter[str] = Counter()
    chosen = []
    for index in reversed(range(len(rows))):
        task = rows[index]["task"]
        if task not in training.tasks and taken[task] < training.untrained_heldout_prompts:
            taken[task] += 1
            chosen.append(index)
    return [rows[index] for index in sorted(chosen)]


class UntrainedTasks:
    """Answers and scores the untrained tasks' prompts; `scores` gives each task's mean reward."""

    def __init__(
        self, rows: list[dict[str, Any]], training: TrainingConfig, database: str, seed: int
    ):
        self.rows, self.database = rows, database
        self.config = EvalConfig(
            temperature=training.heldout_temperature or training.temperature,
            top_p=training.top_p,
            max_new_tokens=training.max_completion_length,
            batch_size=max(len(rows), 1),
            seed=seed,
            rollout_engine=training.rollout_engine,
        )

    def scores(self, model: Any, tokenizer: Any) -> dict[str, float]:
        import torch

        # Evaluation's generate sets eval mode and left padding; training gets its own back.
        was_training, padding_side = model.training, tokenizer.padding_side
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices), torch.no_grad():
            answers = generate(model, tokenizer, [row["prompt"] for row in self.rows], self.config)
        model.train(was_training)
        tokenizer.padding_side = padding_side
        totals: dict[str, list[float]] = defaultdict(list)
        for row, answer in zip(self.rows, answers, strict=True):
            totals[row["task"]].append(score_row(row, answer, self.database)["total"])
        return {task: sum(values) / len(values) for task, values in totals.items()}


class UntrainedHeldout:
    """Mixed into a GRPOTrainer class: each `evaluate` scores the untrained tasks first, and the
    eval's log carries their means beside the held-out reward."""

    untrained: UntrainedTasks
    _untrained_logs: dict[str, float] | None = None

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        model = self.accelerator.unwrap_model(self.model)
        scores = self.untrained.scores(model, self.processing_class)
        self._untrained_logs = {UNTRAINED_PREFIX + task: s for task, s in scores.items()}
        return super().evaluate(*args, **kwargs)

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        # Trainer.evaluate logs its metrics under "eval_" and returns the same dict, which TRL
        # and this add to.
        if self._untrained_logs and any(key.startswith("eval_") for key in logs):
            logs.update(self._untrained_logs)
            self._untrained_logs = None
        super().log(logs, *args, **kwargs)


def with_untrained_heldout(trainer_class: type, untrained: UntrainedTasks | None) -> type:
    """`trainer_class` that answers the untrained tasks at each eval (as it was, for none)."""
    if untrained is None:
        return trainer_class
    return type(
        f"UntrainedHeldout{trainer_class.__name__}",
        (UntrainedHeldout, trainer_class),
        {"untrained": untrained},
    )


def untrained_scores(logs: dict[str, Any]) -> dict[str, float] | None:
    """The untrained tasks' mean rewards an eval's log carries; None when it carries none."""
    scores = {
        key.removeprefix(UNTRAINED_PREFIX): value
        for key, value in logs.items()
        if key.startswith(UNTRAINED_PREFIX)
    }
    return scores or None
