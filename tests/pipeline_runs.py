"""A `tucano` command run as a job runner runs one, for the tests that stop it: in a process group
of its own, its output read as it comes, every process it started remembered; the bound it must
exit within after a signal, and the recipe whose training outlasts any test."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import yaml

from .conftest import REPO_ROOT
from .servers import BIN, descendants, process_table, still_alive
from .test_resume import RECIPE as RESUME_RECIPE

# A spot VM's notice is about 30 seconds.
EXIT_BOUND_S = 30
# The resume test's data and model; far more steps than the tests wait for, so that the signal
# always lands in training.
RECIPE = {
    **RESUME_RECIPE,
    "name": "termination_test",
    "training": {
        "num_generations": 4,
        "prompts_per_step": 2,
        "max_completion_length": 16,
        "max_steps": 10_000,
        "save_steps": 10_000,
        "eval_steps": 10_000,
        "heldout_prompts": 4,
    },
}
EXIT_STATUS = {signal.SIGTERM: 143, signal.SIGINT: 130}
GENERIC_STOP = "every step that finished is kept in {}, and the same command goes on from there"


def tucano_command(args: Sequence[str], pause: str | None = None) -> list[str]:
    """`tucano ARGS`, or the same command pausing in the first call of `pause` (tests/paused)."""
    if pause is None:
        return [str(BIN / "tucano"), *args]
    return [sys.executable, "-m", "tests.paused", pause, "--", "tucano", *args]


class PipelineRun:
    """A `tucano` command started as a job runner starts one (a process group of its own), its
    output read as it comes, and every process it started remembered. `pipeline` by default."""

    def __init__(
        self,
        tmp: Path,
        prefect_home: Path | None,
        args: Sequence[str] = ("pipeline",),
        *,
        recipe: dict | None = None,
        artifacts: Path | None = None,
        pause: str | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.recipe = tmp / "recipe.yaml"
        self.recipe.write_text(yaml.safe_dump(recipe or RECIPE))
        self.artifacts = artifacts or tmp / "artifacts"
        path = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(REPO_ROOT)]))
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **(env or {})}
        self.own_server = prefect_home is not None
        if prefect_home is None:  # the tests' Prefect server
            from prefect.settings import PREFECT_API_URL

            env["PREFECT_API_URL"] = PREFECT_API_URL.value()
        else:  # a temporary server of the run's own
            env["PREFECT_HOME"] = str(prefect_home)
            env.pop("PREFECT_API_URL", None)
        store = ["--recipe", str(self.recipe), "--artifacts", str(self.artifacts)]
        self.process = subprocess.Popen(
            tucano_command([*args, *store], pause),
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.seen: dict[int, int] = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: re.Pattern[str] | str, timeout: float = 300) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if match := re.search(pattern, self.output):
                return match
            assert self.process.poll() is None, f"the run ended first:\n{self.output[-3000:]}"
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} after {timeout} s:\n{self.output[-3000:]}")

    def its_processes(self) -> dict[int, int]:
        """Every process the run has started and still has: pid -> start time."""
        found = descendants(self.process.pid)
        if self.own_server:
            assert found, "the run has no process of its own (its temporary Prefect server)"
        else:  # given the tests' server, a run starts none of its own
            servers = [line for line in map(command_line, found) if "flows.ephemeral" in line]
            assert not servers, f"a temporary Prefect server beside the tests' one: {servers}"
        self.seen.update(found)
        return found

    def stop(self, signum: int, *, kept: str) -> str:
        """`signum` to the run's process group: the run must exit within the bound with
        128 + signum, saying `kept` (a regular expression) of what it kept, and leave no
        process. The match."""
        terminate(self, lambda: os.killpg(self.process.pid, signum))
        output = self.output
        assert self.process.returncode == EXIT_STATUS[signum], output[-3000:]
        name = signal.Signals(signum).name
        said = re.search(rf"tucano \w+: stopped by {name}; {kept}", output)
        assert said, output[-3000:]
        assert self.left_after(seconds=5) == []
        return said

    def left_after(self, seconds: float) -> list[str]:
        """The command lines of the run's processes (those it started, and its process group)
        still alive after at most `seconds`."""
        deadline = time.monotonic() + seconds
        while (left := self._alive()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return [command_line(pid) for pid in left]

    def _alive(self) -> list[int]:
        group = [pid for pid, p in process_table().items() if p.group == self.process.pid]
        return sorted({*still_alive(self.seen), *group})

    def end(self) -> None:
        """Whatever a failed test left, gone."""
        for pid in self._alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.kill()
        self.process.wait()


def command_line(pid: int) -> str:
    try:
        return f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return f"{pid}: (gone meanwhile)"


def terminate(run: PipelineRun, send: Callable[[], None]) -> None:
    """`send` a SIGTERM; the run must exit within the bound."""
    send()
    try:
        run.process.wait(timeout=EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {EXIT_BOUND_S} s after SIGTERM:\n{run.output[-3000:]}")
