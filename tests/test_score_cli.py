"""`tucano score`: production outputs scored by line; bad lines named, the rest still scored."""

import json
from pathlib import Path

import pytest

import tasks.score_logs
from flows.cli import main

SQL = (
    "```sql\nSELECT COUNT(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
    "WHERE c.customer_state = 'SP';\n```\nConta os pedidos de clientes de SP: 2.972 pedidos."
)
GOLD = (
    "SELECT COUNT(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
    "WHERE c.customer_state = 'SP'"
)
LINES = [
    {"task": "push", "completion": "Seu pedido chegou! Conta pra gente o que achou 💙"},
    {
        "task": "sql_qa",
        "completion": SQL,
        "context": {"question": "Pedidos de SP?", "gold_sql": GOLD},
    },
    "this is not json",
    {"task": "extraction", "completion": "{}", "context": {"review_score": True}},
    {"task": "churn", "completion": "x"},
    {"task": "push", "completion": "ok", "context": {"customer_email": "a@b.c"}},
    {"completion": "## Reengajamento\n- Recomendo um cupom.\n- Priorizar o RJ."},
]


@pytest.fixture
def logs(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setattr(tasks.score_logs, "CACHE_DIR", tmp_path / "cache")
    path = tmp_path / "logs.jsonl"
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in LINES) + "\n"
    )
    return path


def test_good_lines_are_scored_and_bad_ones_named(logs: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "scored.jsonl"
    assert main(["score", "--input", str(logs), "--output", str(out)]) == 1
    errors = capsys.readouterr().err
    assert "line 3:" in errors
    assert "line 4: context 'review_score' must be int" in errors
    assert "line 5: unknown task 'churn'" in errors
    assert "line 6: unknown context key 'customer_email'" in errors
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["task"] for r in scored] == ["push", "sql_qa", "insights"]
    assert scored[1]["components"]["match"] == pytest.approx(0.40)  # ran on the shipped data
    assert scored[2]["task_inferred"] and not scored[0]["task_inferred"]
    for record in scored:
        assert 0.0 <= record["total"] <= 1.0
        assert record["total"] == pytest.approx(
            max(0.0, min(1.0, sum(record["components"].values())))
        )


def test_all_good_lines_exit_0_and_the_database_is_built_once(logs: Path, tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(logs.read_text().splitlines()[:2]) + "\n")
    assert main(["score", "--input", str(good), "--output", str(tmp_path / "o1.jsonl")]) == 0
    (database,) = (tmp_path / "cache").glob("olist-*.sqlite")
    built = database.stat().st_mtime_ns
    assert main(["score", "--input", str(good), "--output", str(tmp_path / "o2.jsonl")]) == 0
    assert database.stat().st_mtime_ns == built
    assert (tmp_path / "o1.jsonl").read_text() == (tmp_path / "o2.jsonl").read_text()


def test_a_named_database_is_used(prepared, logs: Path, tmp_path: Path) -> None:
    store, manifest = prepared
    good = tmp_path / "sql.jsonl"
    good.write_text(logs.read_text().splitlines()[1] + "\n")
    out = tmp_path / "o.jsonl"
    args = ["score", "--input", str(good), "--output", str(out)]
    assert main([*args, "--database", store.path(manifest.database)]) == 0
    assert json.loads(out.read_text())["components"]["runs"] == pytest.approx(0.10)
    assert not (tmp_path / "cache").exists()
