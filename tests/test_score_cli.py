"""`tucano score`: production outputs scored by line; bad lines named, the rest still scored."""

import contextlib
import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tasks.evaluation.score_logs
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
    monkeypatch.setattr(tasks.evaluation.score_logs, "CACHE_DIR", tmp_path / "cache")
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


def test_a_push_is_scored_against_its_objective_and_an_unknown_one_is_named(
    tmp_path: Path, capsys
) -> None:
    review = "pedir uma avaliação da compra"
    lines = [
        {"task": "push", "completion": "Conta pra gente o que achou da compra! ⭐", "context": {}},
        *(
            {"task": "push", "completion": text, "context": {"push_objective": review}}
            for text in (
                "Conta pra gente o que achou da compra! ⭐",
                "Use o cupom VOLTA10 na próxima compra! ⭐",
            )
        ),
        {"task": "push", "completion": "Oi!", "context": {"push_objective": "pedir avaliacao"}},
    ]
    logs, out = tmp_path / "push.jsonl", tmp_path / "scored.jsonl"
    logs.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["score", "--input", str(logs), "--output", str(out)]) == 0
    bare, asked, offered, unknown = (json.loads(line) for line in out.read_text().splitlines())
    assert asked["total"] == bare["total"] and asked["components"]["objective"] == 0.0
    assert offered["components"]["objective"] < 0 and offered["total"] < 0.6 * asked["total"]
    assert "'pedir avaliacao' is not an objective" in unknown["not_judged"]["push_objective"]
    assert unknown["components"]["objective"] == 0.0 and "not_judged" not in asked
    assert "push_objective 'pedir avaliacao': 1" in capsys.readouterr().out


def test_a_log_with_objectives_of_its_own_gets_a_row_for_every_row(tmp_path: Path, capsys) -> None:
    """A production log's CRM has objectives the reward was never given: every line is scored on
    what can be judged, the lines say what was not, and the run succeeds."""
    own = (
        "recuperar carrinho abandonado com cupom",
        "avisar sobre a volta de um item ao estoque",
        "convidar para o programa de fidelidade",
    )
    known = "sugerir uma nova compra na mesma categoria"
    lines = [
        {
            "task": "push",
            "completion": f"Ana, {'tem novidade em pet shop pra você' if n % 9 else 'olá {nome}'}!",
            "context": {"push_objective": own[n % 3] if n < 3 else known},
        }
        for n in range(27)
    ]
    logs, out = tmp_path / "crm.jsonl", tmp_path / "scored.jsonl"
    logs.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    assert main(["score", "--input", str(logs), "--output", str(out)]) == 0
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(scored) == 27
    assert [bool(r.get("not_judged")) for r in scored] == [n < 3 for n in range(27)]
    assert all(0.0 <= r["total"] <= 1.0 for r in scored)
    assert scored[0]["components"]["placeholder"] < 0  # what can be judged still is
    printed = capsys.readouterr().out
    assert "27 lines scored, 0 not" in printed
    assert "3 scored without what the rewards do not know" in printed


def test_the_help_says_which_context_keys_each_task_reads(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["score", "--help"])
    printed = capsys.readouterr().out
    assert "  push: push_objective\n" in printed
    assert "  sql_qa: gold_answer, gold_sql, question\n" in printed
    assert "  trazer o cliente de volta com uma oferta" in printed


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


# Hostile input: any line a log pipeline could emit, each drawn with what must become of it:
# ("scored", completion, line), ("refused", None, line) or ("either", None, line).
SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff", "\ud83d"])
TEXT = st.lists(st.characters(exclude_categories=()) | SURROGATES, max_size=40).map("".join)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)  # fmt: skip
CONTEXTS = {
    "extraction": st.fixed_dictionaries({"review_text": TEXT}),
    "sql_qa": st.fixed_dictionaries({"question": TEXT, "gold_sql": TEXT}),
    "insights": st.fixed_dictionaries({"data_summary": TEXT}),
    "push": st.just({}),
}


@st.composite
def records(draw) -> dict:
    """A valid line: a known task (or none, to be inferred), a completion, the task's context,
    and extra fields of any kind."""
    extra_key = TEXT.filter(lambda key: key not in ("task", "context"))
    extras = draw(st.dictionaries(extra_key, JSON_VALUES, max_size=3))
    task = draw(st.sampled_from([None, *CONTEXTS]))
    if task is None:
        return {**extras, "completion": draw(TEXT)}
    return {**extras, "task": task, "completion": draw(TEXT), "context": draw(CONTEXTS[task])}


def _unescaped(value) -> bytes:
    # Unescaped, a lone surrogate becomes bytes that no UTF-8 decoder accepts.
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


SCORED = records().map(lambda r: ("scored", r["completion"], json.dumps(r).encode()))
EITHER = (records().map(_unescaped) | JSON_VALUES.map(_unescaped) | st.binary(max_size=60)).map(
    lambda line: ("either", None, line)
)
# Lines no scorer may see, with the reason each is refused.
HOSTILE = [
    (b"3", "a line must be a JSON object, not a number"),
    (b"[]", "a line must be a JSON object, not an array"),
    (b"null", "a line must be a JSON object, not null"),
    (b'{"completion": NaN}', "not JSON: NaN is not a JSON number"),
    (b'{"completion": "x", "n": 1e999}', "not JSON: number 1e999 is out of range"),
    (b"[" * 100_000, "JSON nested too deeply"),
    (
        b'{"task": "push", "completion": "\x00"}',
        "not JSON: Invalid control character (column 33)",
    ),
    (b'{"completion": "\xff"}', "not UTF-8: invalid start byte (byte offset 16)"),
    (b'{"task": ["push"], "completion": "x"}', "unknown task ['push']"),
    (b'{"completion": "x", "context": []}', "'context' must be an object"),
    (b'{"completion": "x", "context": {"review_scor": 5}}', "unknown context key 'review_scor'"),
    (b"1" * 5_000, "not JSON: Exceeds the limit (4300 digits) for integer string conversion"),
    (b'{"completion": "x"', "not JSON: Expecting ',' delimiter (column 19)"),
    (b"\x0c", "not JSON: Expecting value (column 1)"),
]
REFUSED = st.sampled_from([line for line, _ in HOSTILE]).map(lambda line: ("refused", None, line))
BLANK = st.sampled_from([b"", b" \t"]).map(lambda line: ("either", None, line))


def _as_scored(text: str) -> str:
    """`text` as the line's JSON carries it (an escaped high-low pair is one character), each
    lone surrogate left replaced by U+FFFD."""
    return re.sub("[\ud800-\udfff]", "\ufffd", json.loads(json.dumps(text)))


def _reported_lines(stderr: str, source: Path) -> list[int]:
    prefix = re.compile(rf"tucano score: {re.escape(str(source))}: line (\d+): ")
    return [int(m.group(1)) for m in map(prefix.match, stderr.splitlines()) if m]


def _read_jsonl(data: bytes) -> list[dict]:
    def no_constants(name: str):
        raise AssertionError(f"{name} in the output")

    # Strict UTF-8, and split on "\n" only: str.splitlines would also split at U+2028 and co.
    *lines, after_last = data.decode("utf-8").split("\n")
    assert after_last == ""
    return [json.loads(line, parse_constant=no_constants) for line in lines]


@pytest.fixture
def empty_database(tmp_path: Path) -> Path:
    path = tmp_path / "empty.sqlite"
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE orders (order_id TEXT)")
    return path


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    drawn=st.lists(SCORED | EITHER | REFUSED | BLANK, max_size=8),
    crlf=st.booleans(),
    final_newline=st.booleans(),
)
def test_every_line_is_scored_or_named_and_the_output_stays_utf8_jsonl(
    drawn, crlf, final_newline, tmp_path: Path, empty_database: Path, capsys
) -> None:
    source, out = tmp_path / "hostile.jsonl", tmp_path / "scored.jsonl"
    # A newline would split a drawn line in two; line ends are drawn on their own.
    lines = [line.replace(b"\n", b" ") for _, _, line in drawn]
    end = b"\r\n" if crlf else b"\n"
    source.write_bytes(end.join(lines) + (end if final_newline and lines else b""))
    capsys.readouterr()

    args = ["score", "--input", str(source), "--output", str(out)]
    code = main([*args, "--database", str(empty_database)])

    errors = _reported_lines(capsys.readouterr().err, source)
    scored = _read_jsonl(out.read_bytes())
    nonblank = [n for n, line in enumerate(lines, start=1) if line.strip(b" \t\r\n")]
    assert len(errors) == len(set(errors)) and set(errors) <= set(nonblank)
    kept = [n for n in nonblank if n not in errors]
    assert len(scored) == len(kept)
    assert code == (1 if errors else 0)
    assert not [n for n in errors if drawn[n - 1][0] == "scored"]
    for number, record in zip(kept, scored, strict=True):
        must, completion, _ = drawn[number - 1]
        assert must != "refused", f"line {number} was scored"
        assert 0.0 <= record["total"] <= 1.0
        if must == "scored":
            assert record["completion"] == _as_scored(completion)
    assert {p.name for p in tmp_path.iterdir()} == {"empty.sqlite", source.name, out.name}


def test_each_kind_of_hostile_line_is_named_and_the_rest_scored(tmp_path: Path, capsys) -> None:
    long = {"task": "push", "completion": "Oi! " * 2_500_000}  # a 10 MB line
    odd_key = b'{"\\ud800": 1, "task": "push", "completion": "ok"}'
    lines = [json.dumps(long).encode(), *(line for line, _ in HOSTILE), odd_key]
    source, out = tmp_path / "logs.jsonl", tmp_path / "scored.jsonl"
    source.write_bytes(b"\r\n".join(lines))  # CRLF, and no newline after the last line

    assert main(["score", "--input", str(source), "--output", str(out)]) == 1

    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == len(HOSTILE)
    for (_, reason), error, number in zip(HOSTILE, errors, range(2, len(lines)), strict=True):
        assert error.startswith(f"tucano score: {source}: line {number}: {reason}")
    first, last = _read_jsonl(out.read_bytes())
    assert first["completion"] == long["completion"]
    assert last["\ufffd"] == 1 and last["completion"] == "ok"


def test_a_byte_order_mark_opening_the_file_is_no_bad_line(tmp_path: Path) -> None:
    source, out = tmp_path / "logs.jsonl", tmp_path / "scored.jsonl"
    source.write_bytes(b'\xef\xbb\xbf{"task": "push", "completion": "Oi"}\n')
    assert main(["score", "--input", str(source), "--output", str(out)]) == 0
    assert [row["task"] for row in _read_jsonl(out.read_bytes())] == ["push"]


def _failing_on_the_second_call(monkeypatch, error: BaseException) -> None:
    real_score, calls = tasks.evaluation.score_logs.score, []

    def score(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise error
        return real_score(*args, **kwargs)

    monkeypatch.setattr(tasks.evaluation.score_logs, "score", score)


def test_a_scorer_failing_on_one_line_costs_only_that_line(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    source, out = tmp_path / "logs.jsonl", tmp_path / "scored.jsonl"
    source.write_text('{"task": "push", "completion": "Oi"}\n' * 3)
    _failing_on_the_second_call(monkeypatch, RuntimeError("scorer bug"))
    assert main(["score", "--input", str(source), "--output", str(out)]) == 1
    error = f"tucano score: {source}: line 2: not scored: RuntimeError('scorer bug')"
    assert capsys.readouterr().err.splitlines() == [error]
    assert len(_read_jsonl(out.read_bytes())) == 2


def test_an_interrupted_run_leaves_the_previous_output_untouched(
    tmp_path: Path, monkeypatch
) -> None:
    source, out = tmp_path / "logs.jsonl", tmp_path / "scored.jsonl"
    source.write_text('{"task": "push", "completion": "Oi"}\n' * 3)
    out.write_text("previous run\n")
    _failing_on_the_second_call(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        main(["score", "--input", str(source), "--output", str(out)])
    assert out.read_text() == "previous run\n"
    assert {p.name for p in tmp_path.iterdir()} == {source.name, out.name}


def test_the_installed_command_scores_around_a_lone_surrogate_and_bad_utf8(tmp_path: Path) -> None:
    source = tmp_path / "logs.jsonl"
    source.write_bytes(
        b'{"task": "push", "completion": "Oi \\ud800, seu pedido chegou!"}\n'
        b'{"task": "push", "completion": "Ol\xe1"}\r\n'  # Latin-1, not UTF-8
        b'{"task": "push", "completion": "Tudo certo \xf0\x9f\x92\x99"}'
    )
    tucano = Path(sys.executable).parent / "tucano"
    run = subprocess.run([tucano, "score", "--input", source], capture_output=True, timeout=120)
    assert run.returncode == 1
    assert run.stderr.decode().splitlines() == [
        f"tucano score: {source}: line 2: not UTF-8: invalid continuation byte (byte offset 34)",
        "tucano score: 2 lines scored, 1 not",
    ]
    scored = _read_jsonl(run.stdout)
    assert [r["completion"] for r in scored] == ["Oi \ufffd, seu pedido chegou!", "Tudo certo 💙"]
