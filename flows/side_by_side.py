"""A stage's independent flow runs in processes side by side, one torch thread each.

On a CPU, one process of a small model does not keep two threads busy: two processes of one
thread each do more work on two cores than one process of two threads (benchmarks/threads.py
measures it; CHANGELOG.md has the default run's figures). A recipe's `processes` runs that
many of a stage's runs at once (the seeds' GRPO runs, then the evaluations; `whole_rounds` says
which), each as its own flow run of the run's Prefect API (the temporary server of a `tucano`
run, or the one PREFECT_API_URL names), so the UI and the terminal show each one's progress.
The runs leave their results in the artifact store and the Prefect cache; the calling flow then
asks for the same results in its own process and finds them there, so what it goes on with is
what one process would have made.

`python -m flows.side_by_side module:flow '{parameters}'` is a child's side: it runs that flow.
Each child is a session of its own, so a signal to the run's process group (Ctrl-C, `timeout`,
a container's stop) reaches the parent alone, which passes one SIGTERM on to each child (a second
would stop it at once, its step abandoned); a child stops as on that SIGTERM when its parent ends
however it ends (SIGKILL, the OOM killer), so no seed trains on with nobody to take its result.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

REPO_ROOT = Path(__file__).resolve().parents[1]
# Each child's share of the cores: one thread (torch's intra-op pool and the BLAS libraries').
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
POLL_SECONDS = 0.5
# What a child's failure brings with it into the caller's error (its whole log is on the
# terminal already, interleaved with the others').
ERROR_LINES = 20
# Linux's prctl option: a signal to this process when its parent ends.
PR_SET_PDEATHSIG = 1
PARENT_VARIABLE = "TUCANO_SIDE_BY_SIDE_PARENT"
T = TypeVar("T")


class Job(NamedTuple):
    """One flow run: a flow defined at a module's top level, and its parameters (JSON-able)."""

    flow: Any
    parameters: dict[str, Any]

    def title(self) -> str:
        return f"{self.flow.name}({', '.join(f'{k}={v}' for k, v in self.parameters.items())})"

    def label(self) -> str:
        """What marks this job's lines on the terminal, where the children's logs interleave:
        the seed it trains or answers with, or the start model's."""
        seed = self.parameters.get("seed")
        return "start model" if seed is None else f"seed {seed}"

    def target(self) -> str:
        """Where a child finds the flow: module:name."""
        return f"{self.flow.fn.__module__}:{self.flow.fn.__name__}"


class SideBySideFailed(RuntimeError):
    """A child's flow run ended with an error; the others were stopped."""


def api_url() -> str:
    """The Prefect API this process's flows report to, started if it is the temporary one."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return str(client.api_url)


class Child:
    """A job's process; its stderr (Prefect's log) goes on to this process's as it comes, each
    line marked with the job's label, and its last lines are kept for the error if it fails."""

    def __init__(self, job: Job, api: str):
        command = [sys.executable, "-m", "flows.side_by_side", job.target()]
        command.append(json.dumps(job.parameters))
        path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, **ONE_THREAD, "PREFECT_API_URL": api, "PYTHONPATH": path}
        env[PARENT_VARIABLE] = str(os.getpid())
        self.job, self.tail = job, deque[str](maxlen=ERROR_LINES)
        self.process = subprocess.Popen(
            command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        self.relay = threading.Thread(target=self._relay, daemon=True)
        self.relay.start()

    def _relay(self) -> None:
        assert self.process.stderr is not None
        label = f"[{self.job.label()}] "
        for line in self.process.stderr:
            sys.stderr.write(label + line)
            self.tail.append(line.rstrip("\n"))

    def finished(self) -> bool:
        if self.process.poll() is None:
            return False
        self.relay.join()
        if self.process.returncode != 0:
            raise SideBySideFailed(
                f"{self.job.title()} ended with exit status {self.process.returncode}:\n"
                + "\n".join(self.tail)
            )
        return True


def _stop(running: list[Child]) -> None:
    """SIGTERM, which a training run answers by saving its step and ending, or by abandoning the
    step at the signals' deadline (tasks/core/signals.py); then wait for it."""
    for child in running:
        if child.process.poll() is None:
            child.process.terminate()
    for child in running:
        child.process.wait()


def whole_rounds(items: list[T], processes: int) -> list[T]:
    """The items (a stage's seeds or models, all of them) that fill rounds of `processes`, each
    to run in a child of one thread: the rest are the caller's to run in its own process, with
    every thread, where one job alone on one thread would leave cores idle (the third seed of
    three took 6 min 45 s so, 4 min 41 s on two threads). Chosen from the stage's whole list
    before anything done is left out, so each item's process, and with it its thread count
    (which moves a float's last bits), is the same in every run: a run resumed after a stop ends
    with the numbers of one never stopped, and none depends on which child ended first."""
    return items[: len(items) - len(items) % processes]


def run_side_by_side(jobs: list[Job], processes: int) -> None:
    """Every job to its end, at most `processes` at a time, in the order given; the first that
    fails stops the others and raises SideBySideFailed with its last lines."""
    if not jobs:
        return
    api = api_url()
    waiting, running = list(jobs), list[Child]()
    try:
        while waiting or running:
            while waiting and len(running) < processes:
                running.append(Child(waiting.pop(0), api))
            running = [child for child in running if not child.finished()]
            time.sleep(POLL_SECONDS)
    finally:
        _stop(running)


def end_with_parent() -> None:
    """SIGTERM to this process when its parent ends; at once if it ended before this call. Where
    there is no prctl (not Linux), a child outlives a parent that is killed."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(os.environ.get(PARENT_VARIABLE, os.getppid())):
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m flows.side_by_side")
    parser.add_argument("flow", help="module:name of a flow")
    parser.add_argument("parameters", type=json.loads, help="the flow's parameters, as JSON")
    args = parser.parse_args(argv)
    module, name = args.flow.split(":")
    flow = getattr(importlib.import_module(module), name)
    from flows.storage import in_store
    from tasks.core import signals
    from tasks.core.store import ArtifactStore

    store = ArtifactStore(args.parameters["artifacts"])
    with signals.handled():
        end_with_parent()
        try:
            # Results kept in the store, as the caller's are: its cache is the caller's.
            in_store(flow, store)(**args.parameters)
        except signals.Stopped as stopped:  # a stop, said in a line, not a traceback
            print(f"{flow.name}: {stopped}", file=sys.stderr, flush=True)
            sys.exit(stopped.exit_status)


if __name__ == "__main__":
    main()
