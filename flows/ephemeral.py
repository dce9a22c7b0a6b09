"""The temporary Prefect server of a `tucano` run, bound to the run's life.

With no PREFECT_API_URL, Prefect starts a temporary API server (uvicorn, SQLite) as a plain child
of the run, in the run's process group. Killed with SIGKILL, the run left it behind, holding its
port and database; a SIGTERM to the process group (`timeout`, systemd, a container's stop, a spot
VM's shutdown) stopped it with the run, which then spent minutes retrying its dead API instead of
exiting. `RunBoundServer` starts it instead:

- in a session of its own, so that a signal to the run's process group does not reach it and the
  run can still record how it ended;
- holding the read end of a pipe whose write end only the run holds (its lifeline): however the
  run's process ends, SIGKILL included, the kernel closes the write end, and the server shuts
  down (at once if its graceful shutdown has not ended after `SHUTDOWN_GRACE_S`). Not
  prctl(PR_SET_PDEATHSIG): that fires when the *thread* that started the server ends, and Prefect
  may start it from any thread; nor is it there outside Linux;
- passing on to the run a SIGTERM that reaches the server itself (systemd signals every process
  of a unit), and serving the run until the run has ended.

`python -m flows.ephemeral` is the server's side; `use_run_bound_server` the run's.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import uvicorn
from prefect.server.api.server import SubprocessASGIServer
from prefect.settings import get_current_settings

SHUTDOWN_GRACE_S = 5.0


def use_run_bound_server() -> None:
    """Make the temporary server Prefect starts in this process, if it starts one (only with no
    PREFECT_API_URL), a `RunBoundServer`. Prefect reaches its temporary server through
    `SubprocessASGIServer()`, one instance per process: the first one made, which this makes
    when none is (Prefect's own test harness puts its server there the same way)."""
    RunBoundServer()


class RunBoundServer(SubprocessASGIServer):
    """Prefect's temporary server, started as this module's docstring says."""

    _lifeline: int | None = None

    def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
        self._cut_lifeline()  # Prefect starts it again on another port when its port was taken
        read_end, self._lifeline = os.pipe()
        try:
            command = [sys.executable, "-m", "flows.ephemeral", "--port", str(self.port)]
            command += ["--run", str(os.getpid()), "--lifeline", str(read_end)]
            return subprocess.Popen(
                command,
                # What Prefect gives its own: no UI, and this process's settings.
                env={
                    **os.environ,
                    "PREFECT_UI_ENABLED": "0",
                    "PREFECT__SERVER_EPHEMERAL": "1",
                    "PREFECT__SERVER_FINAL": "1",
                    **get_current_settings().to_environment_variables(exclude_unset=True),
                },
                pass_fds=(read_end,),
                start_new_session=True,
            )
        finally:
            os.close(read_end)

    def _cut_lifeline(self) -> None:
        if self._lifeline is not None:
            os.close(self._lifeline)
            self._lifeline = None

    def stop(self) -> None:
        """The run's normal end: the server sees its lifeline cut and shuts down by itself.
        Prefect's own stop (SIGTERM) would read as the run being terminated."""
        self._cut_lifeline()
        if self.server_process is not None:
            try:
                self.server_process.wait(timeout=2 * SHUTDOWN_GRACE_S)
            except subprocess.TimeoutExpired:
                self.server_process.kill()
        super().stop()


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m flows.ephemeral")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--run", type=int, required=True, help="the run's process id")
    parser.add_argument("--lifeline", type=int, required=True, help="the pipe's read end")
    return parser.parse_args(argv)


class ServerOfARun(uvicorn.Server):
    """The server's side: it ends with the run, and passes a SIGTERM of its own on to it."""

    def __init__(self, config: uvicorn.Config, run: int, lifeline: int) -> None:
        super().__init__(config)
        self.run_pid, self.run_alive = run, True
        threading.Thread(target=self._end_with_the_run, args=(lifeline,), daemon=True).start()

    def _end_with_the_run(self, lifeline: int) -> None:
        while os.read(lifeline, 1):  # the run never writes: b"" once its process has ended
            pass
        self.run_alive = False
        self.should_exit = True
        time.sleep(SHUTDOWN_GRACE_S)
        os._exit(1)

    def handle_exit(self, sig: int, frame: Any) -> None:
        if sig == signal.SIGTERM and self.run_alive:
            os.kill(self.run_pid, signal.SIGTERM)
            return
        super().handle_exit(sig, frame)


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    config = uvicorn.Config(
        "prefect.server.api.server:create_app",
        factory=True,
        host="127.0.0.1",
        port=args.port,
        log_level="error",
        lifespan="on",
    )
    server = ServerOfARun(config, args.run, args.lifeline)
    server.run()
    sys.stdout.flush()
    sys.stderr.flush()
    # uvicorn's STARTUP_FAILURE (3) makes Prefect try another port. After a shutdown (the
    # database closed with the app), tearing the interpreter down would take seconds more.
    os._exit(0 if server.started else 3)


if __name__ == "__main__":
    main()
