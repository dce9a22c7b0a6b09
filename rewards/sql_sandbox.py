"""Running a model's SQL against the Olist SQLite copy without letting it touch anything.

Layers, each enough on its own for its threat: the file is opened read-only and immutable; an
authorizer allows only reading (no writes, ATTACH, PRAGMA, extension loading); SQLite's limits cap
the size of any string or blob the query can build; a progress handler aborts a query that runs
past its instruction or time budget (a recursive CTE that never ends); at most MAX_ROWS rows are
fetched. Whatever goes wrong, the caller gets a result object, never an exception.

A statement that succeeded is answered from memory when it comes again for the same file: the
reward audit runs 382 statements of which 186 differ, and a GRPO group often writes one query
several times. The file is opened immutable, so while it is the same file (path, inode, size and
modification time) its rows cannot differ.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

# One reward must never hold a training step hostage: 2 s is ~1000x a typical gold query here.
TIME_BUDGET_SECONDS = 2.0
# The progress handler runs every this many SQLite VM instructions.
PROGRESS_EVERY = 10_000
# The costliest gold query on the shipped data runs ~170k instructions; 100x that leaves room for
# the full dataset (14x the orders) and clumsy-but-honest SQL, and stops a runaway query in ~0.3 s.
MAX_INSTRUCTIONS = 20_000_000
MAX_ROWS = 1_000
# A SELECT that builds a value larger than this (randomblob(1e9), replicate) fails instead of
# exhausting memory.
MAX_VALUE_BYTES = 1_000_000
MAX_SQL_CHARS = 20_000

# Results kept in memory, the least recently used dropped first: more than the distinct statements
# of an audit or of an evaluation's SQL answers.
KEPT_RESULTS = 1_024
# Only a small result is kept (characters and bytes of its text and blob cells, 8 for a number):
# MAX_ROWS rows of MAX_VALUE_BYTES values each would make a kept result hundreds of megabytes.
KEPT_RESULT_SIZE = 100_000

_ALLOWED_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
_ALLOWED_ACTIONS |= {getattr(sqlite3, "SQLITE_RECURSIVE", 33)}  # WITH RECURSIVE; bounded by budget
_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}


@dataclass(frozen=True)
class Execution:
    ok: bool
    rows: list[tuple] | None = None
    error: str | None = None
    # True when the sandbox stopped the query (denied action, budget, size), as opposed to an
    # honest mistake such as a syntax error or an unknown column.
    refused: bool = False


# How SQLite and the sqlite3 module word the sandbox's own refusals.
_REFUSALS = (
    "not authorized",
    "authorization denied",
    "interrupted",
    "too big",
    "one statement at a time",
    "too many attached",
)


def _failure(exc: BaseException) -> Execution:
    message = f"{type(exc).__name__}: {exc}"
    refused = isinstance(exc, MemoryError | OverflowError) or any(
        phrase in str(exc).lower() for phrase in _REFUSALS
    )
    return Execution(False, error=message, refused=refused)


def _authorizer(action: int, arg1: str | None, arg2: str | None, *_: object) -> int:
    if action not in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_DENY
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _DENIED_FUNCTIONS:
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


_kept: OrderedDict[tuple[object, ...], list[tuple]] = OrderedDict()
_keeping = threading.Lock()


def forget_results() -> None:
    """Drop every kept result (for measuring the statements' own cost)."""
    with _keeping:
        _kept.clear()


def _size(rows: list[tuple]) -> int:
    return sum(len(value) if isinstance(value, str | bytes) else 8 for row in rows for value in row)


def execute(database: str | Path, sql: str) -> Execution:
    """Run one statement read-only under the budgets, or answer it from memory; never raises.
    A failure is never kept: the time budget's depends on the machine's load at the moment."""
    if len(sql) > MAX_SQL_CHARS:
        return Execution(False, error=f"query longer than {MAX_SQL_CHARS} characters", refused=True)
    path = Path(database).resolve()
    try:
        file = os.stat(path)
    except OSError:
        return _run(path, sql)  # which says why it cannot be opened
    key = (str(path), file.st_ino, file.st_size, file.st_mtime_ns, sql)
    with _keeping:
        if (rows := _kept.get(key)) is not None:
            _kept.move_to_end(key)
            return Execution(True, rows=list(rows))
    result = _run(path, sql)
    if result.ok and result.rows is not None and _size(result.rows) <= KEPT_RESULT_SIZE:
        with _keeping:
            _kept[key] = list(result.rows)
            if len(_kept) > KEPT_RESULTS:
                _kept.popitem(last=False)
    return result


def _run(path: Path, sql: str) -> Execution:
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True, timeout=0.1)
    except sqlite3.Error as exc:
        return Execution(False, error=f"cannot open database: {exc}")
    try:
        connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        connection.set_authorizer(_authorizer)
        deadline = time.monotonic() + TIME_BUDGET_SECONDS
        ticks = [0]

        def over_budget() -> int:
            ticks[0] += 1
            return int(ticks[0] * PROGRESS_EVERY > MAX_INSTRUCTIONS or time.monotonic() > deadline)

        connection.set_progress_handler(over_budget, PROGRESS_EVERY)
        cursor = connection.execute(sql)
        rows = cursor.fetchmany(MAX_ROWS + 1)
        if len(rows) > MAX_ROWS:
            return Execution(False, error=f"more than {MAX_ROWS} rows", refused=True)
        return Execution(True, rows=rows)
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError) as exc:
        return _failure(exc)
    finally:
        connection.close()
