"""Model-written SQL runs against the real tables: it can read, and nothing else."""

import hashlib
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from rewards import score, sql_sandbox
from rewards.sql_sandbox import KEPT_RESULT_SIZE, MAX_ROWS, TIME_BUDGET_SECONDS, execute

HOSTILE = {
    "drop": "DROP TABLE orders",
    "delete": "DELETE FROM orders",
    "update": "UPDATE orders SET order_status = 'x'",
    "insert via cte": "WITH x AS (SELECT 1) INSERT INTO orders(order_id) SELECT * FROM x",
    "create": "CREATE TABLE t(x)",
    "temp table": "CREATE TEMP TABLE t(x)",
    "attach": "ATTACH '/etc/passwd' AS p",
    "pragma": "PRAGMA writable_schema = 1",
    "vacuum into": "VACUUM INTO '/tmp/tucano-stolen.db'",
    "two statements": "SELECT 1; DROP TABLE orders",
    "load extension": "SELECT load_extension('/tmp/evil.so')",
    "endless recursive cte": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
    "SELECT COUNT(*) FROM c",
    "cross join blow-up": "SELECT COUNT(*) FROM order_items a, order_items b, order_items c",
    "gigabyte blob": "SELECT randomblob(1000000000)",
    "huge string": "SELECT replace(hex(zeroblob(100000000)), '00', 'ab')",
    "100 MB query": "SELECT '" + "a" * 100_000_000 + "'",
    "too many rows": "SELECT * FROM order_items",
}


@pytest.fixture
def database(prepared) -> Path:
    store, manifest = prepared
    return Path(store.path(manifest.database))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_sql_fails_changes_nothing_and_ends(database: Path, name: str) -> None:
    before = _digest(database)
    started = time.monotonic()
    result = execute(database, HOSTILE[name])
    elapsed = time.monotonic() - started
    assert not result.ok and result.error
    assert _digest(database) == before
    assert not Path("/tmp/tucano-stolen.db").exists()
    # Safety bound, not a speed claim: the budget plus generous slack for a loaded CI machine.
    assert elapsed < TIME_BUDGET_SECONDS + 3


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_completion_scores_zero(database: Path, name: str) -> None:
    completion = (
        f"```sql\n{HOSTILE[name]}\n```\nA consulta calcula o total de pedidos por cliente: 42."
    )
    result = score("sql_qa", completion, database=str(database), gold_answer="[[1]]")
    assert result.total == 0.0


def test_a_100_mb_answer_scores_zero(database: Path) -> None:
    flood = (
        "```sql\nSELECT COUNT(*) FROM orders;\n```\nTotal de pedidos: 7152. " + "a" * 100_000_000
    )
    assert score("sql_qa", flood, database=str(database), gold_answer="[[7152]]").total == 0.0


def test_an_honest_mistake_is_not_treated_as_hostile(database: Path) -> None:
    result = execute(database, "SELECT no_such_column FROM orders")
    assert not result.ok and not result.refused


def test_honest_queries_still_run(database: Path) -> None:
    result = execute(
        database,
        "WITH top AS (SELECT customer_state, COUNT(*) AS n FROM customers GROUP BY 1) "
        "SELECT customer_state FROM top ORDER BY n DESC LIMIT 1",
    )
    assert result.ok and result.rows == [("SP",)]
    assert execute(database, f"SELECT * FROM orders LIMIT {MAX_ROWS}").ok


def test_a_missing_database_is_an_error_not_an_exception(tmp_path: Path) -> None:
    result = execute(tmp_path / "nope.sqlite", "SELECT 1 FROM orders")
    assert not result.ok


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files the sandbox opens from now on, with nothing kept from before."""
    sql_sandbox.forget_results()
    calls: list[str] = []
    connect = sqlite3.connect

    def counted(target: str, *args, **kwargs):
        if str(target).startswith("file:"):  # the sandbox's way of opening a file
            calls.append(target)
        return connect(target, *args, **kwargs)

    monkeypatch.setattr(sql_sandbox.sqlite3, "connect", counted)
    return calls


STATES = "SELECT customer_state, COUNT(*) FROM customers GROUP BY 1 ORDER BY 2 DESC LIMIT 3"


def test_a_statement_that_comes_again_is_answered_from_memory(
    database: Path, opened: list[str]
) -> None:
    first = execute(database, STATES)
    first.rows.append(("XX", 0))  # what a caller does to its rows is its own
    again = execute(str(database), STATES)
    assert first.ok and again.ok and again.rows == first.rows[:-1] and len(again.rows) == 3
    assert len(opened) == 1


def test_another_file_at_the_same_path_is_read_anew(
    database: Path, opened: list[str], tmp_path: Path
) -> None:
    """As a data prep writes its database: another file, renamed into place."""
    copy, other = tmp_path / "olist.sqlite", tmp_path / "other.sqlite"
    shutil.copy(database, copy)
    before = execute(copy, STATES)
    shutil.copy(database, other)
    with sqlite3.connect(other) as connection:
        connection.execute("DELETE FROM customers WHERE customer_state = 'SP'")
    other.replace(copy)
    after = execute(copy, STATES)
    assert before.rows[0][:1] == ("SP",) and ("SP",) not in [row[:1] for row in after.rows]
    assert len(opened) == 2


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT no_such_column FROM orders",  # an error
        f"SELECT * FROM order_items LIMIT {MAX_ROWS + 1}",  # a refusal
        # a result too large to keep: 1,000 rows of 101 characters
        f"SELECT printf('%0101d', rowid) FROM order_items LIMIT {KEPT_RESULT_SIZE // 100}",
    ],
)
def test_failures_and_large_results_are_run_every_time(
    database: Path, opened: list[str], sql: str
) -> None:
    results = [execute(database, sql) for _ in range(2)]
    assert results[0] == results[1]
    assert len(opened) == 2
