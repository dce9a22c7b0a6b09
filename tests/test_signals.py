"""A deferring stage's stop, by real signals to this process: the step in progress may end, but
never later than the deadline; a second signal stops it at once; a side-by-side child whose parent
is killed stops as on a SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.side_by_side import PARENT_VARIABLE
from tasks.core import signals

from .conftest import REPO_ROOT

DEADLINE_S = 1.0


@pytest.fixture(autouse=True)
def short_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(signals, "STOP_DEADLINE_S", DEADLINE_S)


def _step(seconds: float) -> None:
    """A training step of `seconds`, as long a run of Python as a step's generation is."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)


def test_a_step_that_ends_in_time_stops_the_stage_at_its_safe_point() -> None:
    with signals.handled():
        with signals.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            _step(0.2)
            assert signals.requested() == signal.SIGTERM
        with pytest.raises(signals.Stopped) as stopped:
            signals.stop_if_requested("the checkpoint after step 3")
        _step(DEADLINE_S + 0.5)  # disarmed: nothing more lands
    assert stopped.value.kept == "the checkpoint after step 3"
    assert stopped.value.exit_status == 143


def test_a_step_still_running_at_the_deadline_is_abandoned() -> None:
    started = time.monotonic()
    kept = signals.keeping(lambda: "the checkpoint after step 2")
    with signals.handled(), pytest.raises(signals.Stopped) as stopped, kept, signals.deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # a wait, as for a store's answer: the deadline ends it too
    waited = time.monotonic() - started
    assert DEADLINE_S <= waited < DEADLINE_S + 1, waited
    assert stopped.value.kept == "the checkpoint after step 2"


def test_a_second_signal_stops_the_stage_at_once() -> None:
    with signals.handled(), pytest.raises(signals.Stopped), signals.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        _step(0.1)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C twice
        _step(DEADLINE_S / 2)
        pytest.fail("the second Ctrl-C did not stop the stage at once")


# A side-by-side child's start (flows/side_by_side.py main), then a step that never ends.
CHILD = """
import sys, time
from flows.side_by_side import end_with_parent
from tasks.core import signals
signals.STOP_DEADLINE_S = 1.0
with signals.handled():
    end_with_parent()
    try:
        with signals.deferred():
            print("training", flush=True)  # in the step: a signal now is deferred
            time.sleep(60)
    except signals.Stopped as stopped:
        print(stopped, flush=True)
        sys.exit(stopped.exit_status)
"""
PARENT = f"""
import os, subprocess, sys, time
env = {{**os.environ, "{PARENT_VARIABLE}": str(os.getpid())}}
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], env=env)
print(child.pid, flush=True)
time.sleep(60)
"""


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting for a new parent to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_child_whose_parent_is_killed_stops_as_on_sigterm() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD],
        env=env, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
    )  # fmt: skip
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    while "training" not in (line := parent.stdout.readline()):
        assert line, "the child ended before training"
    parent.kill()
    parent.wait()
    # The child's stdout is the parent's pipe, which closes as the child ends.
    said = parent.stdout.read()
    deadline = time.monotonic() + 10
    while _running(child) and time.monotonic() < deadline:  # the exit after the pipe closed
        time.sleep(0.05)
    assert not _running(child), "the child outlived its parent"
    assert "stopped by SIGTERM" in said
