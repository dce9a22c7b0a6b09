"""What a training run says each step, SFT's and GRPO's alike: its progress, a terminal line with
the time left and the run's progress artifact in the Prefect UI; and SFT's line of loss and
learning rate (GRPO's line reads its rewards and held-out readings: grpo_callbacks.py).
"""

from __future__ import annotations

import logging
from typing import Any

from transformers import TrainerCallback

from tasks.core.progress import Progress

log = logging.getLogger("tucano.train")


class ReportProgress(TrainerCallback):
    """Each optimizer step as the stage's progress: a line in the terminal with the time left,
    and the run's progress artifact in the Prefect UI."""

    def __init__(self, stage: str):
        self.stage = stage
        self.progress: Progress | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        self.progress = Progress(self.stage, state.max_steps, "steps", done=state.global_step)

    def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        if self.progress is not None:
            self.progress.advance(state.global_step)


class LogLoss(TrainerCallback):
    """One line per logging step of supervised fine-tuning: its loss and learning rate."""

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
        if logs and "loss" in logs:
            log.info(
                "step %d/%d loss %.4f lr %.2e",
                state.global_step,
                state.max_steps,
                logs["loss"],
                logs.get("learning_rate", float("nan")),
            )
