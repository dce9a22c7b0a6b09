"""Where a long stage is and how long it has left, in the terminal and in the Prefect UI.

A stage (SFT's steps, a seed's GRPO steps, an evaluation's prompts, an analysis's reviews) counts
what it has done; each count is a log line ("SFT: 20/80 steps (25%), 3 min 40 s in, about 11 min
left") and, inside a Prefect flow or task run, an update of the run's progress artifact, which
the UI shows on the run's page. The time left is the time so far, spread evenly over what is
done: a stage whose first units are slower (a compile, a warm cache) says so for a unit or two.
Progress is only ever reported: a Prefect API that does not answer never stops the stage.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any
from uuid import UUID

log = logging.getLogger("tucano.progress")


def duration(seconds: float) -> str:
    """ "45 s", "3 min 40 s", "1 h 5 min"."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def artifact_key(stage: str) -> str:
    """A Prefect artifact key for the stage: lowercase letters, digits and dashes."""
    return "tucano-progress-" + re.sub(r"[^a-z0-9]+", "-", stage.lower()).strip("-")


def _run_context() -> Any:
    from prefect.context import get_run_context
    from prefect.exceptions import MissingContextError

    try:
        return get_run_context()
    except MissingContextError:
        return None


class Progress:
    """`total` units of `unit` for `stage`, `done` of them already (a resumed stage: the time
    left is spread over what this process did); `advance(done)` after each. `clock` is for
    tests."""

    def __init__(
        self, stage: str, total: int, unit: str, *, done: int = 0, clock: Any = time.monotonic
    ):
        self.stage, self.total, self.unit, self.clock = stage, total, unit, clock
        self.started, self.first = clock(), done
        self.artifact: UUID | None = None
        self.publish = _run_context() is not None
        self._say(done)

    def advance(self, done: int) -> str:
        """Report `done` of the total; returns the line it logged."""
        return self._say(min(done, self.total))

    def _say(self, done: int) -> str:
        elapsed = self.clock() - self.started
        share = done / self.total if self.total else 1.0
        since = done - self.first
        left = (
            f", about {duration(elapsed / since * (self.total - done))} left"
            if since > 0 and done < self.total
            else ""
        )
        line = (
            f"{self.stage}: {done}/{self.total} {self.unit} ({share:.0%}), "
            f"{duration(elapsed)} in{left}"
        )
        log.info(line)
        if self.publish:
            self._publish(100 * share, line)
        return line

    def _publish(self, percent: float, line: str) -> None:
        from prefect.artifacts import create_progress_artifact, update_progress_artifact

        try:
            if self.artifact is None:
                self.artifact = create_progress_artifact(
                    percent, key=artifact_key(self.stage), description=line
                )
            else:
                update_progress_artifact(self.artifact, percent, description=line)
        except Exception as exc:  # progress is never worth stopping a stage for
            log.warning("progress of %s not published to Prefect: %s", self.stage, exc)
            self.publish = False
