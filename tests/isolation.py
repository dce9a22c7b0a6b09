"""Each pytest process of the suite on its own, and the check that it leaves no process behind.

`make test` runs the suite in pytest-xdist workers (one per core and one more: conftest.py).
`isolate()` runs when the `tests` package is imported, before anything imports prefect or torch,
in every pytest process (the xdist controller and each worker) and gives it:

- a Prefect home of its own (`PREFECT_HOME`, a fresh temporary folder removed at exit): no
  worker shares a Prefect database, profile or local result storage with another, or with the
  developer's `~/.prefect`; an inherited `PREFECT_API_URL` or `PREFECT_PROFILE` is dropped, so
  no test talks to a server the developer has running;
- a share of the cores for torch: with N workers on C cores, `OMP_NUM_THREADS`/`MKL_NUM_THREADS`
  C // N and at least 1 (1 with three workers on two cores), for the worker and every process
  it starts, so trainings do not fight over the cores with more threads than there are;
- a marker in its environment (`TUCANO_TEST_SESSION`, unique to the process) that every process
  it starts inherits, with the test that was running (`TUCANO_TEST_NODEID`).

Ports are the kernel's free ones (servers.free_port; prefect_test_harness does the same), and
every folder a test writes is under its own `tmp_path`, so workers share neither.

`LeftoverProcesses` (registered by conftest.py) is the check: when the session ends (after the
session fixtures stopped their servers), a process still alive that carries this process's
marker, or that is still a descendant of it, was started by the tests and outlived them. The
check waits a short grace period, then fails the run naming each one (pid, command line and the
test it was started under), and kills them so that a failed run leaves nothing behind either.
Under xdist each worker checks its own processes and the controller reports them. A process
that drops its whole environment and leaves the process tree escapes it; none of ours does.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

SESSION_MARK = "TUCANO_TEST_SESSION"
TEST_MARK = "TUCANO_TEST_NODEID"
GRACE_SECONDS = 15.0
_isolated = False


def isolate() -> None:
    """Set this pytest process's environment (see the module docstring). Idempotent."""
    global _isolated
    if _isolated:
        return
    _isolated = True
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    scratch = Path(tempfile.mkdtemp(prefix=f"tucano-tests-{worker}-"))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    os.environ["PREFECT_HOME"] = str(scratch / "prefect-home")
    for name in ("PREFECT_API_URL", "PREFECT_PROFILE"):
        os.environ.pop(name, None)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if "PYTEST_XDIST_WORKER" in os.environ and workers > 1:
        threads = str(max(1, len(os.sched_getaffinity(0)) // workers))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, threads)
    os.environ[SESSION_MARK] = f"{os.getpid()}-{uuid.uuid4().hex}"
    os.environ[TEST_MARK] = "(collection, before any test)"


@dataclass(frozen=True)
class Leftover:
    pid: int
    command: str
    test: str

    def __str__(self) -> str:
        return f"pid {self.pid} started under {self.test}: {self.command}"


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:  # gone meanwhile, or not ours to read
        return None


def _processes() -> dict[int, tuple[int, str]]:
    """Every live process: pid -> (parent pid, state letter)."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = _read(f"/proc/{entry.name}/stat")
        if stat is None:
            continue
        fields = stat.rsplit(b")", 1)[1].split()  # after "pid (comm)": state, ppid, ...
        table[int(entry.name)] = (int(fields[1]), fields[0].decode())
    return table


def started_by_this_process() -> list[Leftover]:
    """Processes alive now that this pytest process's tests started (zombies excluded)."""
    me, table = os.getpid(), _processes()
    marker = f"{SESSION_MARK}={os.environ[SESSION_MARK]}".encode()
    test_prefix = f"{TEST_MARK}=".encode()
    found = []
    for pid, (_, state) in table.items():
        if pid == me or state in ("Z", "X"):
            continue
        ancestor, seen = table[pid][0], set()
        while ancestor not in (0, 1, me) and ancestor in table and ancestor not in seen:
            seen.add(ancestor)
            ancestor = table[ancestor][0]
        environ = (_read(f"/proc/{pid}/environ") or b"").split(b"\0")
        if ancestor != me and marker not in environ:
            continue
        test = next(
            (
                v[len(test_prefix) :].decode(errors="replace")
                for v in environ
                if v.startswith(test_prefix)
            ),
            "(unknown: started without the suite's environment)",
        )
        command = (_read(f"/proc/{pid}/cmdline") or b"").replace(b"\0", b" ").strip()
        text = command.decode(errors="replace")[:300]
        flow_run = [v.decode() for v in environ if v.startswith(b"PREFECT__FLOW_RUN_ID=")]
        found.append(Leftover(pid, f"{text} ({flow_run[0]})" if flow_run else text, test))
    return sorted(found, key=lambda leftover: leftover.pid)


class LeftoverProcesses:
    """The session-end check (see the module docstring)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.leftovers: list[str] = []

    @property
    def _controller(self) -> bool:
        """The xdist controller: it runs no test; its workers check their own processes."""
        return (
            not hasattr(self.config, "workerinput") and self.config.getoption("dist", "no") != "no"
        )

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        os.environ[TEST_MARK] = item.nodeid  # a process started now says which test it was
        try:
            return (yield)
        finally:
            os.environ[TEST_MARK] = f"(after {item.nodeid})"

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:  # xdist controller: a worker finished
        self.leftovers += getattr(node, "workeroutput", {}).get("tucano_leftovers", [])

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self._controller:
            found = self._check()
            if hasattr(self.config, "workerinput"):
                self.config.workeroutput["tucano_leftovers"] = found
                return
            self.leftovers += found
        if self.leftovers:
            self._report(session)

    def _check(self) -> list[str]:
        deadline = time.monotonic() + GRACE_SECONDS
        while (found := started_by_this_process()) and time.monotonic() < deadline:
            time.sleep(0.5)
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        where = f" (xdist worker {worker})" if worker else ""
        for leftover in found:  # named; now gone, so a failed run leaves nothing behind
            with contextlib.suppress(OSError):
                os.kill(leftover.pid, signal.SIGKILL)
        return [f"{leftover}{where}" for leftover in found]

    def _report(self, session: pytest.Session) -> None:
        lines = [
            f"{len(self.leftovers)} process(es) started by the tests outlived the session "
            f"(still alive {GRACE_SECONDS:.0f} s after the last test; killed now):",
            *(f"  {leftover}" for leftover in self.leftovers),
        ]
        report = pytest.TestReport(
            nodeid="tests/isolation.py::no process started by the tests outlives the session",
            location=("tests/isolation.py", 0, "no process outlives the session"),
            keywords={},
            outcome="failed",
            longrepr="\n".join(lines),
            when="call",
        )
        self.config.hook.pytest_runtest_logreport(report=report)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
