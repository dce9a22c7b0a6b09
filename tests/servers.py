"""Real servers on loopback, started and stopped by the tests: a Prefect server (SQLite) with a
process worker."""

from __future__ import annotations

import glob
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(condition: Callable[[], Any], timeout: float, what: str, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@dataclass
class PrefectServer:
    url: str  # the API: http://127.0.0.1:PORT/api
    home: Path
    env: dict[str, str]
    logs: Path
    processes: dict[str, subprocess.Popen]

    @property
    def ui(self) -> str:
        return self.url.removesuffix("/api")

    def start_worker(self, pool: str = "local") -> subprocess.Popen:
        log = (self.logs / f"worker-{pool}.log").open("a")
        worker = subprocess.Popen(
            [str(BIN / "prefect"), "worker", "start", "--pool", pool, "--type", "process"],
            env=self.env,
            cwd=self.home,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # killed with its flow-run processes, like a lost VM
        )
        self.processes[f"worker-{pool}"] = worker
        return worker

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)


def start_prefect_server(root: Path) -> PrefectServer:
    home, logs = root / "prefect-home", root / "logs"
    home.mkdir(parents=True)
    logs.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_EXTRA_LOGGERS": "tucano",
        "TOKENIZERS_PARALLELISM": "false",
    }
    server = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=home,
        stdout=(logs / "server.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    running = PrefectServer(url, home, env, logs, {"server": server})
    try:
        wait_for(lambda: _healthy(url) or server.poll() is not None, 120, "the Prefect server")
    except TimeoutError:
        running.stop()
        raise
    if server.poll() is not None:
        raise RuntimeError((logs / "server.log").read_text()[-3000:])
    return running


def flow_run_pid(flow_run_id: Any) -> int | None:
    """The process running a flow run: the worker passes its id in the environment."""
    marker = f"PREFECT__FLOW_RUN_ID={flow_run_id}".encode()
    for environ in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(environ, "rb") as handle:
                if marker in handle.read():
                    return int(environ.split("/")[2])
        except OSError:
            continue
    return None
