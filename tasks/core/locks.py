"""One holder at a time for a named piece of work (a training run), kept in the artifact store.

Two `tucano train --seed 42` started seconds apart on one store trained the same run into the same
checkpoints folder, each overwriting the other's checkpoints and adapter. The lock lives in the
store itself, so it holds between any machines that share the store, with no other service.

A lock is a series of generations, `locks/<name>/<n>.json`, each written once with an exclusive
create (`ArtifactStore.create_exclusive`): the holder is whoever created the highest n. Taking the
lock after a released, dead or silent holder means creating n + 1, which only one of any number
of waiters racing for it can do. The holder rewrites its own generation every `refresh_s` with a
heartbeat counter. A waiter judges a holder silent by its own monotonic clock (how long it has
watched the heartbeat not change), never by comparing a time written on another machine with its
own. A holder that was taken over (silent too long: a paused VM, a store it could not reach)
learns it at its next refresh, and its next write through `guarded_store()` raises `LockLost`
instead of overwriting the new holder's work.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tasks.core.store import ArtifactStore

log = logging.getLogger("tucano.locks")

LOCKS_FOLDER = "locks"
# The holder's heartbeat: one small write, often enough that a live holder looks alive long
# before anyone would call it silent.
REFRESH_S = 15.0
# A holder silent this long is taken over: eight missed heartbeats, beyond any pause a live
# holder has (a retried S3 write, a stalled network), yet short next to a training run, so the
# resumed run of a VM that vanished starts within about two minutes of its heartbeats stopping.
STALE_AFTER_S = 120.0
# How often a waiter looks again: a released lock is taken within this.
POLL_S = 2.0
# A holder whose heartbeat thread has not confirmed the lock for this many refreshes (its process
# was paused, the store was unreachable) asks the store itself before it writes anything.
_UNCONFIRMED_REFRESHES = 2

_GENERATION = re.compile(r"^(\d+)\.json$")
# The tokens of the locks this process holds or is taking now: a generation naming this process
# with any other token was left by a holder here that ended without marking it released (the
# store failed), and is taken over at once.
_held_here: set[str] = set()


class LockLost(RuntimeError):
    """The lock was taken over: anything this holder writes now could overwrite the new one's."""


class StoreLock:
    """`with StoreLock(store, name) as lock:` waits for the lock, holds it, releases it on any
    exit. `refresh_s`, `stale_after_s` and `poll_s` are what the module constants say; tests pass
    small ones."""

    def __init__(
        self,
        store: ArtifactStore,
        name: str,
        *,
        refresh_s: float = REFRESH_S,
        stale_after_s: float = STALE_AFTER_S,
        poll_s: float = POLL_S,
    ):
        if stale_after_s < 2 * refresh_s:
            raise ValueError(
                f"stale_after_s={stale_after_s} would take over a holder that missed one heartbeat "
                f"(refresh_s={refresh_s})"
            )
        self.store, self.name = store, name
        self.folder = f"{LOCKS_FOLDER}/{name}"
        self.refresh_s, self.stale_after_s, self.poll_s = refresh_s, stale_after_s, poll_s
        self.generation: int | None = None
        self._record: dict[str, Any] = {}
        self._lost: str | None = None
        self._confirmed_at = 0.0
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"StoreLock({self.store.uri(self.folder)!r})"

    def __enter__(self) -> StoreLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.release()
        except Exception as exc:  # the run's own outcome (or error) matters more
            log.warning(
                "could not mark %s released (%s): a waiter takes it once the holder is seen gone",
                self, exc,
            )  # fmt: skip

    # ---- waiting and taking ----------------------------------------------------------------
    def acquire(self) -> None:
        """Wait until this process holds the lock: it is free, or its holder is released, dead
        (same machine, process gone) or silent for `stale_after_s`."""
        watched: tuple[Any, ...] = ()
        watched_since = time.monotonic()
        announced: str | None = None
        while True:
            generations = self._generations()
            if not generations:
                if self._create(0):
                    return
                continue
            top = generations[-1]
            # Taken before the read: a holder in this process writes "released" before it
            # leaves this set, so a token missing here was gone when the record was read.
            held_when_read = frozenset(_held_here)
            holder = self._read(top)
            if holder is None:  # pruned between the listing and the read
                continue
            seen = (top, holder["token"], holder["heartbeat"], holder["released"])
            if seen != watched:
                watched, watched_since = seen, time.monotonic()
            why = self._takeover_reason(holder, time.monotonic() - watched_since, held_when_read)
            if why is not None:
                if why:
                    log.warning("taking over %s from %s: %s", self, _describe(holder), why)
                if self._create(top + 1):
                    return
                continue
            if announced != holder["token"]:
                announced = holder["token"]
                log.info("waiting for %s, held by %s", self, _describe(holder))
            time.sleep(self.poll_s)

    def _takeover_reason(
        self, holder: dict[str, Any], silent_s: float, held_when_read: frozenset[str]
    ) -> str | None:
        """None while the holder counts as alive; "" when it released the lock; else why not."""
        if holder["released"]:
            return ""
        if holder["pid_space"] == _pid_space():
            if holder["pid"] == os.getpid() and holder["token"] not in held_when_read:
                return "it was held in this process, which no longer holds it"
            if not _process_alive(holder["pid"]):
                return "its process is gone"
        if silent_s >= self.stale_after_s:
            return f"its heartbeat has not changed for {silent_s:.0f} s"
        return None

    def _create(self, generation: int) -> bool:
        record = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "pid_space": _pid_space(),
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "token": uuid.uuid4().hex,
            "heartbeat": 0,
            "released": False,
        }
        _held_here.add(record["token"])  # before any thread here can read the record
        taken = False
        try:
            taken = self._take(generation, record)
        finally:
            if not taken:
                _held_here.discard(record["token"])
        return taken

    def _take(self, generation: int, record: dict[str, Any]) -> bool:
        if not self.store.create_exclusive(self._path(generation), _encode(record)):
            return False
        if max(self._generations(), default=None) != generation:
            # A waiter slow between its listing and its create made a generation that a newer
            # holder had already pruned: the highest one holds, so this one is void.
            self.store.remove(self._path(generation))
            return False
        self.generation, self._record, self._lost = generation, record, None
        self._confirmed_at = time.monotonic()
        for older in self._generations():
            if older < generation:
                with contextlib.suppress(FileNotFoundError):  # pruned by a holder before us
                    self.store.remove(self._path(older))
        # What the previous holder wrote must be seen now, not a listing cached before the wait.
        self.store.forget_listings()
        self._stop.clear()
        self._heartbeat = threading.Thread(
            target=self._keep_alive, name=f"lock-heartbeat-{self.name}", daemon=True
        )
        self._heartbeat.start()
        log.info("holding %s (generation %d)", self, generation)
        return True

    # ---- holding ---------------------------------------------------------------------------
    def _keep_alive(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                with self._mutex:
                    self._confirm()
                    if self._lost:
                        return
                    self._record["heartbeat"] += 1
                    self.store.write_bytes(self._path(self.generation), _encode(self._record))
            except Exception as exc:  # a store hiccup: the next beat tries again
                log.warning(
                    "%s: heartbeat failed (%s); next try in %.0f s", self, exc, self.refresh_s
                )

    def _confirm(self) -> None:
        """Is this holder's generation still the highest, with its token? If not, the lock is
        lost, for good."""
        generations = self._generations()
        top = generations[-1] if generations else None
        holder = self._read(top) if top is not None else None
        if top == self.generation and holder and holder["token"] == self._record["token"]:
            self._confirmed_at = time.monotonic()
            return
        self._lost = (
            f"{self} was taken over by {_describe(holder) if holder else 'another process'} "
            f"after this holder (generation {self.generation}) was silent for too long; "
            "stopping before writing over its work"
        )
        log.error("%s", self._lost)

    def check(self) -> None:
        """Raise `LockLost` when the lock was taken over. Asks the store when the heartbeat
        thread has not confirmed the lock lately (the process was paused, say), so a holder
        waking up cannot write before it learns it was replaced."""
        with self._mutex:
            unconfirmed_s = time.monotonic() - self._confirmed_at
            if self._lost is None and unconfirmed_s > _UNCONFIRMED_REFRESHES * self.refresh_s:
                self._confirm()
            if self._lost:
                raise LockLost(self._lost)

    def guarded_store(self) -> ArtifactStore:
        """The store as the holder should write it: every write checks the lock first."""
        return _GuardedStore(self.store, self)

    def release(self) -> None:
        """Mark the lock released, so a waiter takes it at once (no-op when not held)."""
        if self._heartbeat is None:
            return
        self._stop.set()
        self._heartbeat.join()
        self._heartbeat = None
        try:
            with self._mutex:
                if self._lost is None:
                    self._record["released"] = True
                    self.store.write_bytes(self._path(self.generation), _encode(self._record))
                    log.info("released %s", self)
                self.generation = None
        finally:
            # Only now: a waiter in this process that read the record before it said released
            # would otherwise see this process's holder gone and warn of a takeover.
            _held_here.discard(self._record["token"])

    # ---- the store -------------------------------------------------------------------------
    def _path(self, generation: int | None) -> str:
        return f"{self.folder}/{generation}.json"

    def _generations(self) -> list[int]:
        self.store.forget_listings(self.folder)  # another process's generation shows at once
        names = (_GENERATION.match(name) for name in self.store.listdir(self.folder))
        return sorted(int(match.group(1)) for match in names if match)

    def _read(self, generation: int) -> dict[str, Any] | None:
        try:
            return self.store.read_json(self._path(generation))
        except FileNotFoundError:
            return None


class _GuardedStore(ArtifactStore):
    """An artifact store whose writes (files, folders, removals) first check that its lock is
    still held, so a holder that was taken over stops at its next write, before it lands."""

    def __init__(self, store: ArtifactStore, lock: StoreLock):
        super().__init__(store.root_uri)
        self.lock = lock

    def write_bytes(self, rel: str, data: bytes) -> str:
        self.lock.check()
        return super().write_bytes(rel, data)

    def put_dir(self, local_dir: str | os.PathLike[str], rel: str) -> str:
        self.lock.check()
        return super().put_dir(local_dir, rel)

    def remove(self, rel: str) -> None:
        self.lock.check()
        super().remove(rel)


def _encode(record: dict[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True).encode()


def _describe(holder: dict[str, Any]) -> str:
    return f"host {holder['host']} pid {holder['pid']} (since {holder['started']})"


def _pid_space() -> str:
    """Where a pid names one process: this kernel boot and pid namespace. Two containers can
    share a host name, and the same pid in each is two processes that cannot see each other; a
    pid from another space says nothing about a process here."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:  # no /proc (macOS): the host name is the best there is
        return socket.gethostname()


def _process_alive(pid: int) -> bool:
    """Whether `pid` runs here; a zombie (dead, its parent has not reaped it yet) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True  # no /proc: the signal test is all there is
    return stat.rsplit(b")", 1)[1].split()[0] != b"Z"
