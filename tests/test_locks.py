"""One training run per seed and store: the lock in the store (local and S3), two `tucano train`
started at once, and the Prefect concurrency limit of the deployed seeded training."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tasks.core.locks import StoreLock
from tasks.core.store import ArtifactStore

from .conftest import REPO_ROOT, SHIPPED_DATA
from .servers import moto_s3
from .test_resume import RECIPE

BUCKET = "tucano-locks"
# Small timings, so that a heartbeat, a silent holder and a takeover take a second, not minutes.
# Fast, with room for a heartbeat starved by the rest of the suite on two cores and a moto server
# answering slowly under that load (at 1 s, and once at 3 s on S3, a live holder was taken over).
FAST = {"refresh_s": 0.2, "stale_after_s": 6.0, "poll_s": 0.05}
# A process that takes the lock and then writes through it until told it lost it (exit 3).
HOLDER = """
import itertools, sys, time
from tasks.core.locks import LockLost, StoreLock
from tasks.core.store import ArtifactStore
lock = StoreLock(ArtifactStore(sys.argv[1]), "run", refresh_s=0.2, stale_after_s=60, poll_s=0.05)
lock.acquire()
print("held", flush=True)
work = lock.guarded_store()
try:
    for step in itertools.count():
        work.write_text("work.txt", str(step))
        time.sleep(0.05)
except LockLost as exc:
    print(f"lost: {exc}", flush=True)
    sys.exit(3)
"""


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server, and the environment s3fs reads (fake keys, its endpoint)."""
    with moto_s3(tmp_path_factory.mktemp("moto"), BUCKET) as env:
        yield env


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path) -> ArtifactStore:
    if request.param == "local":
        return ArtifactStore(tmp_path / "store")
    request.getfixturevalue("s3")
    return ArtifactStore(f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}")


def test_an_exclusive_create_never_overwrites(store: ArtifactStore) -> None:
    assert store.create_exclusive("locks/run/0.json", b"first")
    assert not store.create_exclusive("locks/run/0.json", b"second")
    assert store.read_bytes("locks/run/0.json") == b"first"


def _acquire_in_thread(lock: StoreLock) -> threading.Event:
    held = threading.Event()

    def take() -> None:
        lock.acquire()
        held.set()

    threading.Thread(target=take, daemon=True).start()
    return held


def test_a_second_acquirer_waits_for_a_live_holder_until_it_releases(store, caplog) -> None:
    first, second = StoreLock(store, "run", **FAST), StoreLock(store, "run", **FAST)
    first.acquire()
    with caplog.at_level(logging.INFO, logger="tucano.locks"):
        held = _acquire_in_thread(second)
        # Longer than stale_after_s: a holder whose heartbeat goes on is never taken over.
        assert not held.wait(1.2 * FAST["stale_after_s"])
        first.release()
        assert held.wait(5)
    second.release()
    waiting = [r.getMessage() for r in caplog.records if r.getMessage().startswith("waiting")]
    assert len(waiting) == 1, waiting  # said once, naming the holder
    assert f"pid {os.getpid()} (since " in waiting[0]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def _start_holder(store: ArtifactStore) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, store.root_uri],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert holder.stdout.readline().strip() == "held"
    return holder


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()  # stopped or not
    process.wait()


@pytest.mark.slow
def test_a_holder_whose_process_died_on_this_machine_is_taken_over_at_once(
    tmp_path, caplog
) -> None:
    store = ArtifactStore(tmp_path / "store")
    holder = _start_holder(store)
    holder.kill()
    holder.wait()
    lock = StoreLock(store, "run", refresh_s=15, stale_after_s=120, poll_s=0.05)
    with caplog.at_level(logging.INFO, logger="tucano.locks"):
        assert _acquire_in_thread(lock).wait(5)  # not the 120 s a silent holder gets
    lock.release()
    assert f"from host {socket.gethostname()} pid {holder.pid}" in caplog.text
    assert "its process is gone" in caplog.text


@pytest.mark.slow
def test_a_silent_holder_is_taken_over_after_stale_after_s_and_stops_at_its_next_write(
    tmp_path, caplog
) -> None:
    """SIGSTOP: the holder's process lives but says nothing, as on a paused VM or behind a cut
    network. Once taken over and woken up, it fails its next write instead of making it."""
    store = ArtifactStore(tmp_path / "store")
    holder = _start_holder(store)
    try:
        holder.send_signal(signal.SIGSTOP)
        lock = StoreLock(store, "run", **FAST)
        started = time.monotonic()
        with caplog.at_level(logging.INFO, logger="tucano.locks"):
            assert _acquire_in_thread(lock).wait(FAST["stale_after_s"] + 10)
        assert time.monotonic() - started >= FAST["stale_after_s"]
        assert f"its heartbeat has not changed for {FAST['stale_after_s']:.0f} s" in caplog.text
        holder.send_signal(signal.SIGCONT)
        output, _ = holder.communicate(timeout=30)
        assert holder.returncode == 3, output
        assert "was taken over by host" in output and "stopping before writing" in output
        lock.release()
    finally:
        _stop(holder)


@pytest.mark.slow
def test_waiters_racing_for_a_silent_holder_s_lock_hold_it_one_at_a_time(tmp_path) -> None:
    """Four waiters watch the same silent holder and see it stale at the same moment: one takes
    the lock, and the others wait for it, each in turn, never two at once."""
    store = ArtifactStore(tmp_path / "store")
    holder = _start_holder(store)
    inside, most_inside, order = [0], [0], []
    mutex = threading.Lock()

    def waiter(number: int) -> None:
        with StoreLock(store, "run", **FAST):
            with mutex:
                inside[0] += 1
                most_inside[0] = max(most_inside[0], inside[0])
                order.append(number)
            time.sleep(0.3)
            with mutex:
                inside[0] -= 1

    try:
        holder.send_signal(signal.SIGSTOP)
        waiters = [threading.Thread(target=waiter, args=(n,), daemon=True) for n in range(4)]
        for thread in waiters:
            thread.start()
        for thread in waiters:
            thread.join(timeout=30)
        assert sorted(order) == [0, 1, 2, 3]
        assert most_inside[0] == 1
    finally:
        _stop(holder)


# ---- two `tucano train` at once ---------------------------------------------------------------
MAX_STEPS = 4
STEP_LINE = re.compile(rf"step (\d+)/{MAX_STEPS} ")


def _train_twice_at_once(tmp_path: Path, artifacts: str, env: dict[str, str]) -> list[str]:
    from prefect.settings import PREFECT_API_URL

    from flows.pipeline import sft_flow
    from flows.storage import in_store

    recipe = json.loads(json.dumps(RECIPE))
    recipe["training"].update(max_steps=MAX_STEPS, save_steps=2, eval_steps=2)
    config = tmp_path / "recipe.yaml"
    config.write_text(yaml.safe_dump(recipe))
    # Data, audit and base model first, here: the two commands find them in the store's cache,
    # meet at the training within a second of each other, and spend their time on what is tested.
    in_store(sft_flow, ArtifactStore(artifacts))(str(config), artifacts, str(SHIPPED_DATA))
    command = [sys.executable, "-m", "flows.cli", "train", "--seed", "7"]
    command += ["--recipe", str(config), "--artifacts", artifacts]
    env = {**os.environ, **env, "PREFECT_API_URL": PREFECT_API_URL.value()}
    env["PYTHONUNBUFFERED"] = "1"
    output = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    runs = [subprocess.Popen(command, cwd=REPO_ROOT, env=env, **output) for _ in range(2)]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    for run, output in zip(runs, outputs, strict=True):
        assert run.returncode == 0, output[-3000:]
    return outputs


def _assert_trained_once(outputs: list[str]) -> None:
    steps = [[int(step) for step in STEP_LINE.findall(output)] for output in outputs]
    assert sorted(steps, key=len) == [[], list(range(1, MAX_STEPS + 1))], steps
    adapters = {output.strip().splitlines()[-1] for output in outputs}
    assert len(adapters) == 1 and adapters.pop().startswith(f"adapter (seed 7, step {MAX_STEPS}): ")


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_two_train_commands_on_one_local_store_train_the_seed_once(tmp_path) -> None:
    _assert_trained_once(_train_twice_at_once(tmp_path, str(tmp_path / "store"), {}))


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_two_train_commands_on_one_s3_store_train_the_seed_once(tmp_path, s3) -> None:
    artifacts = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"
    _assert_trained_once(_train_twice_at_once(tmp_path, artifacts, s3))


# ---- the deployments' Prefect limit ------------------------------------------------------------
@pytest.mark.usefixtures("prefect_api")
def test_a_seed_s_second_deployed_run_waits_for_its_slot_while_other_seeds_go_on(
    tmp_path,
) -> None:
    from flows.deployment_flows import seed_slot

    store = ArtifactStore(tmp_path / "store")

    def start_run(seed: int) -> threading.Event:
        running = threading.Event()

        def run() -> None:
            with seed_slot(store, seed):
                running.set()

        threading.Thread(target=run, daemon=True).start()
        return running

    with seed_slot(store, 1):
        same_seed, other_seed = start_run(1), start_run(2)
        assert other_seed.wait(10)
        assert not same_seed.wait(3)
    assert same_seed.wait(60)  # its turn once the first run ends
