"""Business question -> SQL + explanation: does the SQL run, and does it answer the question?

V4.2's four tiers judged only how an answer looks; a 0.5B model learned to look like SQL.
Here the query is executed in the sandbox against the pipeline's SQLite copy of the Olist tables,
and the largest share of credit goes to a result that matches the gold answer:

  matches the gold result 0.40 | runs 0.10 | SQL structure 0.15 (three keywords)
  query + explanation 0.15 | the result stated, right, in the prose 0.10 | domain words 0.10

Without a database (scoring outside the pipeline with no gold) the execution tiers are 0, so such
an answer scores at most 0.40. Where the gold result is known and the answer does not return it
(its query runs and returns something else, does not run, or is not there), the answer is wrong
however well it is written: everything but the match keeps WRONG_RESULT_KEEPS (a fluent
explanation of the wrong number misleads more than none), so a query that runs still earns more
than one that does not.

What the explanation states is held to the data too. A reader takes a number the prose states as
the answer: each one (but the question's own, a year or "as 3 cidades", and the query's literals)
must be a value of the query's result and of the gold where there is one, at the precision it is
written to and read as Brazilians write it ("2.972", "14,83%"). A wrong one, invented or
recalled from the full public dataset where the shipped database holds a subset, makes the answer
wrong: the total keeps WRONG_NUMBER_KEEPS, so it earns less than stating no number, which is no
fault. An answer that offers more than one distinct query leaves the choice to the reader: it
keeps SECOND_QUERY_KEEPS, or DISAGREEING_KEEPS when the queries do not return the same rows.
A hostile answer scores 0 outright: SQL the sandbox refuses
(writes, ATTACH, PRAGMA, runaway or oversized queries) or a text far longer than any answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from rewards.common import SCAN_LIMIT, Score, completion_text, distinct_hits, fold
from rewards.numbers import DECIMALS, Reading, agrees, values, written_numbers
from rewards.sql_reading import assumes_answer, misdescribed, read_query
from rewards.sql_sandbox import Execution, execute

# A cut answer may hold a whole query (the part an analyst runs), never a whole explanation, and
# the analyst must find where the answer stops.
CUT_KEEPS = 0.7
W_MATCH, W_RUNS, W_STRUCTURE, W_QUERY_AND_EXPLANATION, W_NUMBERS, W_DOMAIN = (
    0.40, 0.10, 0.15, 0.15, 0.10, 0.10,
)  # fmt: skip
WRONG_RESULT_KEEPS = 0.5
# A number stated as the result that the data does not hold is a wrong answer in the words a
# reader reads: as wrong as a query that returns another result.
WRONG_NUMBER_KEEPS = WRONG_RESULT_KEEPS
# An explanation that says the query computes something else (a late rate called an on-time
# rate, an average a total, a filter it does not have) tells the reader a wrong answer about a
# right number: as wrong as the number (rewards/sql_reading.py).
MISDESCRIBED_KEEPS = WRONG_RESULT_KEEPS
# Two queries offered as alternatives leave the analyst's choice to the reader; when they return
# different rows, one of them is a wrong answer given beside the right one.
SECOND_QUERY_KEEPS, DISAGREEING_KEEPS = 0.7, 0.4
# A query that returns the gold number among extra columns (e.g. state + count for a count
# question) found the answer but did not answer exactly what was asked.
PARTIAL_MATCH = 0.5
KEYWORDS_FOR_FULL_STRUCTURE = 3
DOMAIN_WORDS_FOR_FULL_CREDIT = 3
# Prose outside the query must be a sentence or so, not a stray word.
MIN_EXPLANATION_WORDS = 6
SQL_KEYWORDS = (
    "select", "from", "where", "join", "group by", "order by", "having", "count", "sum",
    "avg", "limit", "distinct", "case when", "inner join", "left join", "round",
)  # fmt: skip
_KEYWORD_PATTERNS = [re.compile(r"\b" + kw.replace(" ", r"\s+") + r"\b") for kw in SQL_KEYWORDS]
_SELECT = re.compile(r"\b(?:with|select)\b", re.IGNORECASE)
_FENCED = re.compile(r"```(?:sql|sqlite)?[ \t]*\n(.*?)(?:```|$)", re.IGNORECASE | re.DOTALL)
# Any statement a model might write, harmful ones included, so that the sandbox judges it.
_STATEMENT = re.compile(
    r"^\s*(?:select|with|drop|delete|update|insert|replace|create|alter|attach|detach|pragma"
    r"|vacuum|reindex|analyze)\b",
    re.IGNORECASE | re.MULTILINE,
)
_FROM = re.compile(r"\bfrom\b", re.IGNORECASE)
_QUERY_END = re.compile(r";|```|\n\s*\n")
# A FROM this far after the SELECT no longer belongs to it.
MAX_SELECT_TO_FROM = 4_000
# Ordinals and the scale of a rating are no result: "o 1º lugar", "3,6 de 5" (dates are no
# number at all: rewards/numbers.py).
_NOT_A_RESULT = re.compile(r"\d+\s*[ºª°]|(?<=\d)\s*(?:de|/)\s*5\b(?![.,]?\d)")

# V4.2's hotfix grew this list from 10 to 30 words after the audit showed SQL answers in good
# Portuguese scoring as off-topic. Stems, matched on accent-folded words.
DOMAIN_STEMS = (
    "pedido", "cliente", "venda", "vendedor", "produto", "categori", "entrega", "frete",
    "pagamento", "parcela", "avaliac", "nota", "receita", "faturamento", "ticket", "estado",
    "cidade", "prazo", "atraso", "compra", "preco", "valor", "media", "total", "taxa",
    "boleto", "cartao", "desconto", "estoque", "logistic",
)  # fmt: skip


def find_query(text: str) -> tuple[int, int] | None:
    """Span of the answer's SQL: the first ```sql block that holds a statement, else the first
    SELECT/WITH ... FROM ..., else the first line that starts a statement (each to ';', a fence
    or a blank line)."""
    fence = _FENCED.search(text)
    if fence and _STATEMENT.match(fence.group(1)):
        return fence.span(1)
    select = _SELECT.search(text)
    if select is not None:
        from_ = _FROM.search(text, select.end(), select.end() + MAX_SELECT_TO_FROM)
        if from_ is not None:
            end = _QUERY_END.search(text, from_.end())
            return select.start(), end.start() if end else len(text)
    statement = _STATEMENT.search(text)
    if statement is None:
        return None
    end = _QUERY_END.search(text, statement.end())
    return statement.start(), end.start() if end else len(text)


def later_queries(text: str, after: int) -> list[tuple[tuple[int, int], bool]]:
    """What follows the answer's query and may be another one: each ```sql block that holds a
    statement, and each line outside a fence that starts one; with whether it is fenced (an
    unfenced line is a query only if the database takes it as one: prose may begin "With")."""
    fences = list(_FENCED.finditer(text))
    found = [
        (fence.span(1), True)
        for fence in fences
        if fence.start(1) >= after and _STATEMENT.match(fence.group(1))
    ]
    for statement in _STATEMENT.finditer(text, after):
        start = statement.start() + len(statement.group()) - len(statement.group().lstrip())
        if any(fence.start() <= start < fence.end() for fence in fences):
            continue
        end = _QUERY_END.search(text, statement.end())
        found.append(((start, end.start() if end else len(text)), False))
    return sorted(found)


def _query_key(sql: str) -> str:
    return " ".join(sql.lower().split()).rstrip("; ")


def _cell(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return round(float(value), DECIMALS)
    return value.strip().lower() if isinstance(value, str) else value


def _normalized(rows: Sequence[Sequence[Any]]) -> list[tuple]:
    return sorted((tuple(_cell(v) for v in row) for row in rows), key=repr)


def result_match(rows: Sequence[Sequence[Any]], gold: Sequence[Sequence[Any]]) -> float:
    """1 for the gold result (any row order, any column names), PARTIAL_MATCH when a one-value
    gold answer is among a few returned cells, else 0."""
    if _normalized(rows) == _normalized(gold):
        return 1.0
    if len(gold) == 1 and len(gold[0]) == 1 and 0 < len(rows) <= 10:
        target = _cell(gold[0][0])
        if any(_cell(value) == target for row in rows for value in row):
            return PARTIAL_MATCH
    return 0.0


def gold_rows(database: Any, gold_answer: Any, gold_sql: Any) -> list[tuple] | None:
    if isinstance(gold_answer, str):
        try:
            return [tuple(row) for row in json.loads(gold_answer)]
        except (ValueError, TypeError):
            return None
    if isinstance(gold_sql, str) and database:
        run = execute(database, gold_sql)
        return run.rows if run.ok else None
    return None


def numeric_cells(rows: Sequence[Sequence[Any]]) -> set[float]:
    """The numbers a result holds (a number stored as text, as strftime gives, included), and
    how many rows it has ("a consulta traz 2 cidades")."""
    cells = {float(len(rows))}
    for value in (value for row in rows for value in row):
        if isinstance(value, str):
            try:
                value = float(value.replace(",", "."))
            except ValueError:
                continue
        if isinstance(value, int | float) and not isinstance(value, bool):
            cells.add(round(float(value), DECIMALS))
    return cells


def _agrees_with_all(readings: set[Reading], truths: list[set[float]]) -> bool:
    return all(any(agrees(r, value) for r in readings for value in truth) for truth in truths)


def stated_results(
    prose: str, question: Any, queries: Sequence[str], truths: list[set[float]]
) -> tuple[int, int]:
    """(right, wrong): the numbers the prose states as the result, held to every truth (the
    query's result, the gold). Ordinals and the question's own numbers (a year, "as 3
    cidades") state no result; nor does one of the query's literals (ROUND's 2, a LIMIT) unless
    it is the result."""
    asked = values(question if isinstance(question, str) else "")
    literals = values(" ".join(queries))
    right = wrong = 0
    for readings in written_numbers(_NOT_A_RESULT.sub(" ", prose)):
        said = {reading.value for reading in readings}
        if said & asked:
            continue
        if _agrees_with_all(readings, truths):
            right += 1
        elif not said & literals:
            wrong += 1
    return right, wrong


COMPONENTS = (
    "match", "runs", "structure", "query_and_explanation", "numbers", "domain", "wrong_number",
    "misdescribed", "second_query",
)  # fmt: skip


def _zero() -> Score:
    return Score(0.0, dict.fromkeys(COMPONENTS, 0.0))


def _alternatives(
    text: str, span: tuple[int, int], database: Any
) -> tuple[list[tuple[int, int]], list[Execution]] | None:
    """The answer's distinct queries after the first (a copy, or a last copy cut short, is a
    loop, not an alternative) and, with a database, their executions; None when one is
    hostile."""
    keys = [_query_key(text[span[0] : span[1]])]
    spans: list[tuple[int, int]] = []
    runs: list[Execution] = []
    for (start, end), fenced in later_queries(text, span[1]):
        key = _query_key(text[start:end])
        cut_copy = not text[end:].strip() and any(earlier.startswith(key) for earlier in keys)
        if not key or key in keys or cut_copy:
            continue
        run = execute(database, text[start:end]) if database else None
        if run is not None and run.refused:
            return None
        if not fenced and (run is None or not run.ok):
            continue
        keys.append(key)
        spans.append((start, end))
        runs.extend([run] if run is not None else [])
    return spans, runs


def _prose(text: str, spans: list[tuple[int, int]]) -> str:
    """The text around the queries."""
    cuts = [0, *(edge for span in spans for edge in span), len(text)]
    return " ".join(text[start:end] for start, end in zip(cuts[::2], cuts[1::2], strict=True))


def _second_query_keeps(runs: list[Execution | None]) -> float:
    """What an answer of these queries keeps: all the first's alone; with alternatives, more
    when they are known to return the same rows."""
    if len(runs) < 2:
        return 1.0
    if any(run is None for run in runs):  # no database to tell whether they agree
        return SECOND_QUERY_KEEPS
    first = _normalized(runs[0].rows or []) if runs[0].ok else None
    agree = all(run.ok and _normalized(run.rows or []) == first for run in runs)
    return SECOND_QUERY_KEEPS if agree else DISAGREEING_KEEPS


def score(
    completion: Any,
    database: Any = None,
    gold_answer: Any = None,
    gold_sql: Any = None,
    question: Any = None,
) -> Score:
    text = completion_text(completion)
    if len(text) > SCAN_LIMIT:
        return _zero()  # a flood, not an answer
    lowered = text.lower()
    keywords = sum(1 for pattern in _KEYWORD_PATTERNS if pattern.search(lowered))
    span = find_query(text)
    run = execute(database, text[span[0] : span[1]]) if span and database else None
    alternatives = _alternatives(text, span, database) if span else ([], [])
    if alternatives is None or (run is not None and run.refused):
        return _zero()
    later, later_runs = alternatives
    spans = [span, *later] if span else []
    prose = _prose(text, spans)
    prose_words = len(re.findall(r"[^\W\d_]{2,}", prose))
    gold = gold_rows(database, gold_answer, gold_sql)
    ran = run is not None and run.ok
    query = read_query(text[span[0] : span[1]]) if span else None
    assumed = (
        query is not None and gold is not None and assumes_answer(query, gold, question, gold_sql)
    )
    match = result_match(run.rows or [], gold) if ran and gold is not None and not assumed else 0.0
    # What a stated number is held to: the query's result, and the gold where there is one.
    truths = [numeric_cells(rows) for rows in (run.rows if ran else None, gold) if rows is not None]
    queries = [text[start:end] for start, end in spans]
    right, wrong = stated_results(prose, question, queries, truths) if truths else (0, 0)
    components = {
        "match": W_MATCH * match,
        "runs": W_RUNS * ran,
        "structure": W_STRUCTURE
        * min(keywords, KEYWORDS_FOR_FULL_STRUCTURE)
        / KEYWORDS_FOR_FULL_STRUCTURE,
        "query_and_explanation": W_QUERY_AND_EXPLANATION
        if span and prose_words >= MIN_EXPLANATION_WORDS
        else 0.0,
        "numbers": W_NUMBERS if right and not wrong else 0.0,
        "domain": W_DOMAIN
        * min(distinct_hits(fold(prose), DOMAIN_STEMS), DOMAIN_WORDS_FOR_FULL_CREDIT)
        / DOMAIN_WORDS_FOR_FULL_CREDIT,
    }
    # With a database and a gold result, the answer is judged right or wrong.
    if database and gold is not None and match == 0.0:
        components = {name: WRONG_RESULT_KEEPS * value for name, value in components.items()}
    subtotal = sum(components.values())
    components["wrong_number"] = (
        -(1 - WRONG_NUMBER_KEEPS) * wrong / max(1, right + wrong) * subtotal
    )
    subtotal += components["wrong_number"]
    # Held to its query whether it runs or not: a broken query must not dodge the check.
    rows = run.rows or [] if ran else []
    wrongly_told = misdescribed(prose, query, rows, question) if query else []
    components["misdescribed"] = -(1 - MISDESCRIBED_KEEPS) * subtotal if wrongly_told else 0.0
    subtotal += components["misdescribed"]
    keeps = _second_query_keeps([run, *later_runs] if database else [None] * len(spans))
    components["second_query"] = -(1 - keeps) * subtotal
    return Score(subtotal + components["second_query"], components)
