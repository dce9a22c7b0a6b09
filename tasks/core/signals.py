"""One way for every stage of a run to stop on SIGTERM or SIGINT, at its next safe point.

SIGTERM is what `timeout`, systemd, a container's stop and a spot VM's shutdown send; SIGINT is
Ctrl-C. Either one ends the run with `Stopped`, a Prefect `TerminationSignal`: Prefect records the
task and flow runs as crashed (a cancel from the UI as cancelled) and never retries them, and the
command exits 128 + the signal's number. Where a stage stops:

- prep, the audit, evaluation and export write their results whole at their end: at once, and
  nothing is half-written;
- SFT and GRPO defer the signal (`deferred`): the step in progress ends, a checkpoint is saved and
  uploaded, and the trainer stops (`requested` is what their callback reads). A step that has not
  ended STOP_DEADLINE_S after the signal is abandoned there: the run stops at once and keeps the
  newest checkpoint in the store (every one there is complete), so a platform that kills 30 s
  after its SIGTERM never finds the run still writing;
- analyze writes its rows batch by batch: the batch being written is finished, the one being
  generated is dropped, and a rerun goes on after the rows in the file.

A second signal while a stage defers stops it at once. `Stopped.kept` says where what a restart
goes on from is; the command prints it. Once a stop is under way, further signals (Prefect's flow
engine sends its own again after recording the crash) change nothing.

Signal handlers run in the main thread alone; where a stage runs elsewhere, its signal stops it at
once instead of at a safe point (and a warning says so).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from prefect.exceptions import TerminationSignal

log = logging.getLogger("tucano.signals")

HANDLED = (signal.SIGTERM, signal.SIGINT)
# Kubernetes, a spot VM's shutdown and most schedulers kill 30 s after SIGTERM: half of that for
# the step in progress, the rest for the processes to end, the run's parent last.
STOP_DEADLINE_S = 15.0


class Stopped(TerminationSignal):
    """The run was asked to stop; `kept` is where what a restart goes on from was left."""

    def __init__(self, signum: int, kept: str | None = None):
        super().__init__(signum)
        self.kept = kept

    @property
    def name(self) -> str:
        return signal.Signals(self.signal).name

    @property
    def exit_status(self) -> int:
        return 128 + self.signal

    def __str__(self) -> str:
        return f"stopped by {self.name}" + (f"; {self.kept}" if self.kept else "")


_requested: int | None = None
_timer: threading.Timer | None = None
_past_deadline = False
_deferring = 0
_stopping = False


def stop(signum: int, kept: str | None = None) -> Stopped:
    """The exception that ends the run; from here on, further signals are ignored."""
    global _stopping
    _stopping = True
    _disarm()
    return Stopped(signum, kept)


def _arm() -> None:
    global _timer
    # A thread's timer, not SIGALRM's: Prefect's task timeouts and pytest-timeout use that one.
    _timer = threading.Timer(STOP_DEADLINE_S, _deadline_reached)
    _timer.daemon = True
    _timer.start()


def _disarm() -> None:
    global _timer, _past_deadline
    if _timer is not None:
        _timer.cancel()
    _timer, _past_deadline = None, False


def _deadline_reached() -> None:
    """STOP_DEADLINE_S after the first signal the stage is still in its step: the main thread gets
    the signal again (a real one, which ends a wait as the first did) and `_handle` abandons the
    step."""
    global _past_deadline
    if _requested is not None and not _stopping:
        _past_deadline = True
        signal.pthread_kill(threading.main_thread().ident, _requested)


def requested() -> int | None:
    """The signal a deferring stage has been asked to stop by, if any."""
    return _requested


def stop_if_requested(kept: str | None = None) -> None:
    """At a deferring stage's safe point: end the run if a signal asked for it."""
    if _requested is not None:
        raise stop(_requested, kept)


@contextlib.contextmanager
def keeping(kept: Callable[[], str]) -> Iterator[None]:
    """Inside, a stop that lands says `kept()` of what a restart goes on from (Prefect's own
    SIGTERM handler raises a plain `TerminationSignal`, which says nothing)."""
    try:
        yield
    except TerminationSignal as exc:
        if isinstance(exc, Stopped) and exc.kept:
            raise
        raise stop(exc.signal, kept()) from exc


def _handle(signum: int, frame: Any) -> None:
    global _requested
    if _stopping:
        return
    if _past_deadline:
        log.warning(
            "%s: the step in progress did not end within %.0f s; abandoned, the newest "
            "checkpoint kept", signal.Signals(signum).name, STOP_DEADLINE_S,
        )  # fmt: skip
        raise stop(signum)
    if _deferring and _requested is None:
        _requested = signum
        log.warning(
            "%s: stopping after the step in progress, with a checkpoint, or in %.0f s without "
            "it (send it again to stop at once)",
            signal.Signals(signum).name, STOP_DEADLINE_S,
        )  # fmt: skip
        _arm()
        return
    raise stop(signum)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """For a command's whole life: a signal outside a deferring stage raises `Stopped` where the
    run is. Prefect's flow engine puts its own SIGTERM handler in front of this one during a flow
    run, and hands the signal on to it once it has recorded the crash."""
    global _requested, _stopping
    _requested, _stopping = None, False
    previous = {signum: signal.signal(signum, _handle) for signum in HANDLED}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Inside, a first signal is only recorded (`requested`), for the stage to stop at its next
    safe point; a second one stops at once."""
    global _deferring, _requested, _stopping
    if not _deferring:  # a signal before this one would have stopped the run already
        _requested, _stopping = None, False
    try:
        previous = {signum: signal.signal(signum, _handle) for signum in HANDLED}
    except ValueError:  # not the main thread: signals stop it wherever it is
        log.warning("a signal cannot wait for a safe point outside the main thread")
        yield
        return
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if not _deferring:  # the stage reached its safe point: the step ended in time
            _disarm()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
