"""The trainer's side of a run's checkpoints, for SFT and GRPO alike: each checkpoint uploaded into
the store as soon as it is saved, a SIGTERM or SIGINT turned into a last checkpoint, and where a
stateful callback saves its state beside the model's and reads it back on resume. Apart from
checkpoints.py, the store's side, because it imports transformers, which a GRPO run must load only
after Unsloth has patched it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from tasks.core import signals
from tasks.training.checkpoints import RunCheckpoints


def checkpoint_dir(args: Any, state: Any) -> Path:
    return Path(args.output_dir) / f"checkpoint-{state.global_step}"


def saved_state(resume: Path | None, name: str) -> dict[str, Any] | None:
    path = resume / name if resume else None
    return json.loads(path.read_text()) if path is not None and path.exists() else None


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
