"""The TRL/transformers callbacks every training run shares, SFT's and GRPO's: report the stage's
progress, upload checkpoints into the store, turn a SIGTERM or SIGINT into a final checkpoint, and
SFT's line per step. Apart from GRPO's (callbacks.py), so that SFT's cache key, which digests the
code SFT imports, does not change with GRPO's stop rules or reward logging.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from tasks.core import signals
from tasks.core.progress import Progress
from tasks.training.checkpoints import RunCheckpoints

log = logging.getLogger("tucano.train")


def checkpoint_dir(args: Any, state: Any) -> Path:
    return Path(args.output_dir) / f"checkpoint-{state.global_step}"


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


class UploadCheckpoints(TrainerCallback):
    """Copies each saved checkpoint into the store (marker last) as soon as it exists."""

    def __init__(self, checkpoints: RunCheckpoints):
        self.checkpoints = checkpoints

    def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        local = checkpoint_dir(args, state)
        if local.is_dir():
            self.checkpoints.upload(local, state.global_step)


class StopOnSignal(TrainerCallback):
    """A SIGTERM or SIGINT during training (tasks/core/signals.py): finish the step in progress,
    save a checkpoint (uploaded by `UploadCheckpoints`) and stop."""

    def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        if signals.requested():
            control.should_save = True
            control.should_training_stop = True
