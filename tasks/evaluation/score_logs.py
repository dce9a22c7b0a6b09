"""Scoring production outputs: JSONL in, the same lines with `total` and `components` out.

Each input line is `{"task": ..., "completion": ..., "context": {...}}`, with `"truncated":
true|false` where the caller knows whether the answer was cut at the token budget. A production
log has push objectives (and analysis focuses) of its own: such a line is scored on what can be
judged, and its output says under `not_judged` what was not, and why. A line without
a task is classified by form (and marked `task_inferred`); a bad line is reported by its number
and the other lines are still scored. SQL answers run against the shipped Olist database, built
once from data/olist/ into a cache folder, or against a database the caller names.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, NoReturn

from rewards import READS, SCORERS, score
from rewards.classify import classify
from rewards.context import ContextError, RewardContext, check_context
from rewards.insights import judges_focus
from rewards.push import objective_named
from tasks.core.caching import PROJECT_ROOT
from tasks.prep.database import build_database
from tasks.prep.olist import fingerprint_source, load_tables

SHIPPED_DATA = PROJECT_ROOT / "data" / "olist"
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tucano"

# JSON's own whitespace: a line of only these is blank; any other byte makes it a line to score.
JSON_WHITESPACE = b" \t\r\n"
UTF8_BOM = b"\xef\xbb\xbf"
# A JSON escape such as "\ud800" decodes to a lone surrogate, which no UTF-8 can carry.
_SURROGATE = re.compile("[\ud800-\udfff]")
# An error message quotes the offending value; a 10 MB one would bury the report.
MAX_MESSAGE_CHARS = 300
# A line that is JSON but no object is told what it is in JSON's words, not Python's.
_JSON_KINDS = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
    type(None): "null",
}


class BadLine(ValueError):
    """An input line that cannot be scored; the message says why."""


def shipped_database(data: Path = SHIPPED_DATA, cache_dir: Path | None = None) -> Path:
    """The SQLite copy of the shipped Olist tables, built on first use and kept by content."""
    cache_dir = cache_dir or CACHE_DIR
    source = fingerprint_source(str(data))
    path = cache_dir / f"olist-{source.fingerprint[:16]}.sqlite"
    if not path.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".tmp-", suffix=".sqlite")
        os.close(fd)
        build_database(load_tables(source), Path(tmp))
        os.replace(tmp, path)
    return path


def _context(record: dict[str, Any]) -> tuple[RewardContext, dict[str, str]]:
    """The line's context as the rewards take it, and what of it is not judged and why: a log
    has objectives and focuses of its own, and its line is scored on the rest."""
    context = record.get("context")
    if context is None:
        return {}, {}
    if not isinstance(context, dict):
        raise BadLine("'context' must be an object")
    objective = context.get("push_objective")
    not_judged = {}
    if isinstance(objective, str) and objective_named(objective) is None:
        context = {key: value for key, value in context.items() if key != "push_objective"}
        not_judged["push_objective"] = (
            f"{objective!r} is not an objective the push reward knows; scored on the rest "
            "(length, Portuguese, placeholders, promises, refusals, the situation unread)"
        )
    try:
        checked = check_context(context)
    except ContextError as exc:
        raise BadLine(str(exc)) from None
    focus, summary = checked.get("analysis_focus"), checked.get("data_summary")
    if isinstance(focus, str) and isinstance(summary, str) and not judges_focus(focus, summary):
        not_judged["analysis_focus"] = (
            f"{focus!r} names no metric of the summary's table the insights reward knows; "
            "scored on the rest"
        )
    return checked, not_judged


def score_record(record: Any, database: Callable[[], Path]) -> dict[str, Any]:
    if not isinstance(record, dict):
        kind = _JSON_KINDS.get(type(record), type(record).__name__)
        raise BadLine(f"a line must be a JSON object, not {kind}")
    completion = record.get("completion")
    if not isinstance(completion, str):
        raise BadLine("'completion' must be a string")
    context, not_judged = _context(record)
    # Optional: whether the answer was cut at the token budget (a cut answer scores less, and the
    # monitor counts it).
    truncated = record.get("truncated")
    if truncated is not None and not isinstance(truncated, bool):
        raise BadLine(f"'truncated' must be true or false, not {truncated!r}")
    task = record.get("task")
    inferred = task is None
    if inferred:
        task = classify(completion)
    elif not isinstance(task, str) or task not in SCORERS:
        raise BadLine(f"unknown task {task!r}; expected one of {list(SCORERS)}")
    db = str(database()) if task == "sql_qa" else None
    result = score(task, completion, database=db, truncated=truncated, **context)
    return {
        **record,
        "task": task,
        "task_inferred": inferred,
        "total": result.total,
        "components": result.components,
        **({"not_judged": unread} if (unread := _read_by(task, not_judged)) else {}),
    }


def _read_by(task: str, not_judged: dict[str, str]) -> dict[str, str]:
    """What of the unjudged context the task's reward would have read."""
    return {key: why for key, why in not_judged.items() if key in READS[task]}


def _not_json_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def parse_line(raw: bytes) -> Any:
    """The line's JSON value, each lone surrogate replaced by U+FFFD so it can be scored and
    written back as UTF-8; BadLine for anything that is not one UTF-8 JSON value."""
    try:
        text = raw.decode("utf-8")
        value = json.loads(text, parse_constant=_not_json_constant, parse_float=_finite)
        if "\\u" in text:
            # Only an escape yields a surrogate; the raw text holds none, so re-reading the value
            # written out without escapes is a faithful copy in which each one can be swapped.
            written = json.dumps(value, ensure_ascii=False)
            if _SURROGATE.search(written):
                value = json.loads(_SURROGATE.sub("\ufffd", written))
        return value
    except UnicodeDecodeError as exc:
        raise BadLine(f"not UTF-8: {exc.reason} (byte offset {exc.start})") from None
    except RecursionError:
        raise BadLine("JSON nested too deeply") from None
    except json.JSONDecodeError as exc:
        # Some of json's messages end in "at", meant to be followed by the position.
        raise BadLine(f"not JSON: {exc.msg.removesuffix(' at')} (column {exc.colno})") from None
    except ValueError as exc:  # NaN, 1e999, an integer of more digits than Python converts
        raise BadLine(f"not JSON: {exc}") from None


def scored_line(raw: bytes, database: Callable[[], Path]) -> tuple[dict[str, Any], bytes]:
    """One input line scored, and as the UTF-8 output line (newline included)."""
    record = score_record(parse_line(raw), database)
    line = (json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")
    return record, line


def _clip(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE_CHARS else message[:MAX_MESSAGE_CHARS] + "…"


class Scored(NamedTuple):
    number: int
    record: dict[str, Any] | None  # the scored line, None when it is bad
    line: bytes | None  # the record as an output line
    error: str | None


def score_lines(lines: Iterable[bytes], database: Callable[[], Path]) -> Iterator[Scored]:
    """Every non-blank line, scored or with its error."""
    for number, raw in enumerate(lines, start=1):
        if number == 1:
            raw = raw.removeprefix(UTF8_BOM)  # editors on Windows start UTF-8 files with one
        if not raw.strip(JSON_WHITESPACE):
            continue
        try:
            # Without its line end, so an error's column is counted on this line alone.
            record, line = scored_line(raw.rstrip(b"\r\n"), database)
        except BadLine as exc:
            yield Scored(number, None, None, f"line {number}: {_clip(str(exc))}")
        except Exception as exc:
            # A scorer's bug on one line must not cost the rest of the file its scores: the
            # line is still named and the run still exits 1.
            yield Scored(number, None, None, f"line {number}: not scored: {_clip(repr(exc))}")
        else:
            yield Scored(number, record, line, None)


@contextlib.contextmanager
def output_sink(path: str | None) -> Iterator[BinaryIO]:
    """Where output lines go: stdout, or `path`, which appears complete or not at all."""
    if path is None:
        sys.stdout.flush()
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    target = Path(path).resolve()
    if target.exists() and not target.is_file():
        # A pipe or device (/dev/stdout) can only be written to; replacing it would remove it.
        with open(target, "wb") as sink:
            yield sink
        return
    # Not mkstemp: its 0600 would stick to the output; open(x) honours the umask like any file.
    partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
    try:
        with open(partial, "xb") as sink:
            yield sink
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
