"""Real servers on loopback, started and stopped by the tests: a Prefect server (SQLite) with
process workers, moto's S3, and a git remote holding this checkout."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

BIN = Path(sys.executable).parent


def prefect_home_on(home: Path, database: Path) -> Path:
    """`home`, made, with a copy of `database` as its Prefect database: a migrated one spares a
    server started there its migrations."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copy(database, home / "prefect.db")
    return home


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

    def start_worker(
        self,
        pool: str = "local",
        *,
        name: str | None = None,
        python: Path = Path(sys.executable),
        folder: Path | None = None,
    ) -> subprocess.Popen:
        """A process worker of `pool` run by `python`, in `folder` (the server's home when
        None); `name` (default `worker-<pool>`) keys it in `processes` and names its log."""
        name = name or f"worker-{pool}"
        log = (self.logs / f"{name}.log").open("a")
        command = [str(python), "-m", "prefect", "worker", "start", "--pool", pool]
        worker = subprocess.Popen(
            [*command, "--type", "process", "--name", name],
            env=self.env,
            cwd=folder or self.home,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # killed with its flow-run processes, like a lost VM
        )
        self.processes[name] = worker
        return worker

    def stop(self) -> None:
        """The workers first, so that a flow run still finishing reaches the API, then the
        server; each with every process it started. Prefect starts each flow run in a session of
        its own, which the worker's process group does not reach."""
        for name, process in self.processes.items():
            if name != "server":
                # a worker whose flow run was just ended can take 20 s to exit on SIGTERM;
                # nothing waits on it in a teardown
                _stop_tree(process, timeout=5)
        _stop_tree(self.processes["server"])


class Process(NamedTuple):
    parent: int
    group: int
    started: int  # clock ticks after boot: with the pid, which process it is (pids are reused)


def process_table() -> dict[int, Process]:
    """Every live process (zombies excluded)."""
    table = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat, "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in (b"Z", b"X"):
            table[int(stat.split("/")[2])] = Process(*map(int, (fields[1], fields[2], fields[19])))
    return table


def descendants(pid: int) -> dict[int, int]:
    """The processes descending from `pid` now: pid -> start time."""
    table = process_table()
    tree, parents = {}, {pid}
    while parents:
        children = {child for child, process in table.items() if process.parent in parents}
        tree.update({child: table[child].started for child in children})
        parents = children
    return tree


def still_alive(processes: dict[int, int]) -> list[int]:
    """Those of `processes` (pid -> start time) alive now."""
    table = process_table()
    return [
        pid for pid, started in processes.items() if pid in table and table[pid].started == started
    ]


def _stop_tree(process: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM a process's group and every process descending from it; SIGKILL what is left
    after `timeout`."""
    tree = descendants(process.pid)
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    while time.monotonic() < deadline and still_alive(tree):
        time.sleep(0.2)
    for pid in still_alive(tree):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def start_prefect_server(root: Path, database: Path | None = None) -> PrefectServer:
    """`prefect server start` in a home under `root`, on a copy of `database` (`prefect_home_on`)
    or on a new one."""
    home, logs = root / "prefect-home", root / "logs"
    home.mkdir(parents=True)
    logs.mkdir()
    if database is not None:
        prefect_home_on(home, database)
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_API_URL": url,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_EXTRA_LOGGERS": "tucano",
        "TOKENIZERS_PARALLELISM": "false",
        # A worker looks for scheduled runs every 10 s by default: each run the tests start
        # through a deployment (a resumed attempt, a fanned-out seed) waited up to that long.
        # Each second, the polls cost the server and each worker 3 s of CPU a minute.
        "PREFECT_WORKER_QUERY_SECONDS": "3",
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


def start_moto_server(root: Path) -> tuple[subprocess.Popen, str]:
    """moto's S3 in server mode: a real HTTP endpoint, in memory, on loopback."""
    port = free_port()
    server = subprocess.Popen(
        [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=(root / "moto.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    endpoint = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                return True
        except OSError:
            return False

    wait_for(lambda: up() or server.poll() is not None, 60, "the moto server")
    return server, endpoint


@contextlib.contextmanager
def moto_s3(root: Path, bucket: str) -> Iterator[dict[str, str]]:
    """A moto S3 server with `bucket` made, and this process's environment set as s3fs reads it
    (fake keys, the server's endpoint) for as long as it runs: the environment, back."""
    server, endpoint = start_moto_server(root)
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    s3fs.S3FileSystem().mkdir(bucket)
    try:
        yield env
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        s3fs.S3FileSystem.clear_instance_cache()
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=20)


class DyingProxy:
    """A TCP proxy in front of the S3 server that dies, as a server or its network would, in
    the middle of the Nth upload whose path contains `path_part`: that request is cut off, every
    connection is dropped and new ones are refused until `revive()`."""

    def __init__(self, upstream_port: int, path_part: str, die_on_upload: int) -> None:
        self.upstream_port = upstream_port
        self.path_part = path_part.encode()
        self.die_on_upload = die_on_upload
        self.uploads_seen = 0
        self.died = threading.Event()
        self.port = free_port()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.revive()

    def revive(self) -> None:
        self.died.clear()
        self._listener = socket.create_server(("127.0.0.1", self.port), reuse_port=True)
        threading.Thread(target=self._accept, args=(self._listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while not self.died.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        try:
            while data := source.recv(65536):
                if from_client and data.startswith(b"PUT ") and self.path_part in data[:2048]:
                    self.uploads_seen += 1
                    if self.uploads_seen == self.die_on_upload:
                        sink.sendall(data[: len(data) // 2])  # half a request, then nothing
                        self.die()
                        return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            source.close()
            sink.close()

    def die(self) -> None:
        self.died.set()
        if self._listener is not None:
            self._listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):  # already closed by its pump
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._sockets.clear()


def git_remote(project: Path, root: Path) -> str:
    """A bare repository whose main branch holds `project`'s files as they are now (uncommitted
    edits and new files included, what .gitignore leaves out left out): a team's git server,
    reached by URL. `project` need not be a git checkout."""
    bare = root / "tucano-commerce.git"
    subprocess.run(["git", "init", "--quiet", "--bare", str(bare)], check=True)
    git = ["git", f"--git-dir={bare}", f"--work-tree={project}"]
    identity = ["-c", "user.name=tests", "-c", "user.email=tests@localhost"]
    subprocess.run([*git, "add", "--all"], check=True)
    subprocess.run([*git, *identity, "commit", "--quiet", "-m", "the checkout"], check=True)
    subprocess.run([*git, "branch", "--force", "--quiet", "main"], check=True)
    return f"file://{bare}"


def python_without_the_project(root: Path) -> Path:
    """A Python with the project's dependencies and not the project, as on a worker machine that
    installed deployments/requirements.txt and has no checkout: a venv whose one path entry is
    this environment's site-packages. A path a .pth file adds is not a site folder, so the
    editable install's finder there never loads, and `import flows` fails outside a clone."""
    env = root / "worker-python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    (site,) = env.glob("lib/python*/site-packages")
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env / "bin" / "python"
