"""A training run's checkpoints in the artifact store: complete or invisible, newest restorable.

Each checkpoint is uploaded as a folder whose marker, written last, records its content digest.
Restoring walks the checkpoints newest first and takes the first whose marker exists and whose
downloaded files match the digest; a half-uploaded or truncated one is skipped with a warning.
Old checkpoints are pruned to the recipe's limit, never the one holding the best model.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path
from typing import Any

from tasks.core.store import ArtifactStore, digest_folder

log = logging.getLogger("tucano.checkpoints")

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_step(folder: Path) -> int:
    """The step a `checkpoint-N` folder was saved at."""
    match = _CHECKPOINT.match(folder.name)
    if match is None:
        raise ValueError(f"{folder} is not a checkpoint-N folder")
    return int(match.group(1))


class RunCheckpoints:
    def __init__(self, store: ArtifactStore, folder: str, keep: int):
        self.store, self.folder, self.keep = store, folder, keep
        self.protected: set[int] = set()

    def _rel(self, step: int) -> str:
        return f"{self.folder}/checkpoint-{step}"

    def steps(self) -> list[int]:
        """Steps of every checkpoint folder in the store, complete or not, oldest first."""
        names = (_CHECKPOINT.match(name) for name in self.store.listdir(self.folder))
        return sorted(int(match.group(1)) for match in names if match)

    def complete_steps(self) -> list[int]:
        """Steps of the checkpoints whose upload finished (their marker exists), oldest first."""
        return [step for step in self.steps() if self.store.is_complete(self._rel(step))]

    def kept(self, whose: str) -> str:
        """What a restart of `whose` run goes on from: its newest complete checkpoint."""
        complete = self.complete_steps()
        if not complete:
            return f"{whose} had no checkpoint yet; the same command starts it again"
        return f"{whose}'s checkpoint after step {complete[-1]} is in {self.store.uri(self.folder)}"

    def upload(self, local_dir: Path, step: int) -> None:
        self.store.put_dir(local_dir, self._rel(step))
        self.prune()

    def prune(self) -> None:
        complete = self.complete_steps()
        for step in complete[: max(0, len(complete) - self.keep)]:
            if step not in self.protected:
                self.store.remove(self._rel(step))

    def remove_all(self) -> None:
        """Every checkpoint, once the run's result is in the store and none can be resumed. A
        store that refuses the delete costs disk space, not the finished run: it is logged."""
        try:
            self.store.remove(self.folder)
        except OSError as error:
            log.warning("could not remove %s (%s)", self.store.uri(self.folder), error)

    def restore_latest(self, output_dir: Path) -> Path | None:
        """Download the newest verified checkpoint into output_dir; None when there is none."""
        for step in reversed(self.steps()):
            rel = self._rel(step)
            if not self.store.is_complete(rel):
                log.warning("skipping %s: no completeness marker (upload never finished)", rel)
                continue
            local = self.store.get_dir(rel, output_dir / f"checkpoint-{step}")
            if digest_folder(local) != self.store.dir_digest(rel):
                log.warning("skipping %s: files do not match their marker (truncated/corrupt)", rel)
                shutil.rmtree(local)
                continue
            log.info("resuming from %s", self.store.uri(rel))
            return local
        return None


def train_from(trainer: Any, resume: Path | None) -> None:
    """`trainer.train()`, from the restored checkpoint if any. Restored at the run's last step (a
    stop or crash after its final checkpoint, before its result was stored), the checkpoint's
    weights and state are loaded instead: transformers checks `max_steps` after a step, so its
    resume would train one step past the end."""
    if resume is not None and checkpoint_step(resume) >= trainer.args.max_steps:
        from transformers.trainer import TRAINER_STATE_NAME
        from transformers.trainer_callback import TrainerState
        from transformers.trainer_utils import align_special_tokens

        log.info("%s is the run's last step: loaded, not trained past", resume.name)
        # What train() does to the model before its first step (the generation config's end of
        # turn as a list), so the saved model is the one a run never stopped saves.
        align_special_tokens(trainer.model, trainer.processing_class)
        trainer._load_from_checkpoint(str(resume))
        trainer.state = TrainerState.load_from_json(str(resume / TRAINER_STATE_NAME))
        return
    trainer.train(resume_from_checkpoint=str(resume) if resume else None)
