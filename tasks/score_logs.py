"""Scoring production outputs: JSONL in, the same lines with `total` and `components` out.

Each input line is `{"task": ..., "completion": ..., "context": {...}}`. A line without a task is
classified by form (and marked `task_inferred`); a bad line is reported by its number and the
other lines are still scored. SQL answers run against the shipped Olist database, built once
from data/olist/ into a cache folder, or against a database the caller names.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from rewards import SCORERS, score
from rewards.classify import classify
from tasks.prep.database import build_database
from tasks.prep.olist import fingerprint_source, load_tables

SHIPPED_DATA = Path(__file__).resolve().parents[1] / "data" / "olist"
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tucano"

# The context keys each reward reads (documented in the README), and what their values must be.
CONTEXT_TYPES: dict[str, tuple[type, ...]] = {
    "review_text": (str,),
    "review_score": (int,),
    "gold_delivered_late": (bool,),
    "gold_category": (str,),
    "question": (str,),
    "gold_sql": (str,),
    "gold_answer": (str,),
    "data_summary": (str,),
    "push_objective": (str,),
}


class BadLine(ValueError):
    pass


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


def _context(record: dict[str, Any]) -> dict[str, Any]:
    context = record.get("context") or {}
    if not isinstance(context, dict):
        raise BadLine("'context' must be an object")
    for key, value in context.items():
        if key not in CONTEXT_TYPES:
            raise BadLine(f"unknown context key {key!r}; known: {sorted(CONTEXT_TYPES)}")
        types = CONTEXT_TYPES[key]
        # True is an int to Python, and 1 is no boolean: both must be what the key says.
        wrong_kind = (bool in types) != isinstance(value, bool)
        if value is not None and (not isinstance(value, types) or wrong_kind):
            raise BadLine(f"context {key!r} must be {types[0].__name__}, got {value!r}")
    return context


def score_record(record: Any, database: Callable[[], Path]) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise BadLine("a line must be a JSON object")
    completion = record.get("completion")
    if not isinstance(completion, str):
        raise BadLine("'completion' must be a string")
    context = _context(record)
    task = record.get("task")
    inferred = task is None
    if inferred:
        task = classify(completion)
    elif task not in SCORERS:
        raise BadLine(f"unknown task {task!r}; expected one of {list(SCORERS)}")
    db = str(database()) if task == "sql_qa" else None
    result = score(task, completion, database=db, **context)
    return {
        **record,
        "task": task,
        "task_inferred": inferred,
        "total": result.total,
        "components": result.components,
    }


def score_lines(
    lines: Iterable[str], database: Callable[[], Path]
) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """(line number, scored record or None, error or None) for every non-blank line."""
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield number, score_record(json.loads(line), database), None
        except (BadLine, json.JSONDecodeError) as exc:
            yield number, None, f"line {number}: {exc}"
