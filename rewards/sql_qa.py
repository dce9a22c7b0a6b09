"""Business question -> SQL + explanation: does the SQL run, and does it answer the question?

The seed's four tiers judged only how an answer looks; a 0.5B model learned to look like SQL.
Here the query is executed in the sandbox against the pipeline's SQLite copy of the Olist tables,
and the largest share of credit goes to a result that matches the gold answer:

  matches the gold result 0.40 | runs 0.10 | SQL structure 0.15 (three keywords)
  query + explanation 0.15 | concrete numbers in the prose 0.10 | domain words 0.10 (three)

Without a database (scoring outside the pipeline with no gold) the execution tiers are 0, so such
an answer scores at most 0.50. Where the gold result is known and the answer does not return it
(its query runs and returns something else, does not run, or is not there), the answer is wrong
however well it is written: everything but the match keeps WRONG_RESULT_KEEPS (a fluent
explanation of the wrong number misleads more than none), so a query that runs still earns more
than one that does not.
A hostile answer scores 0 outright: SQL the sandbox refuses
(writes, ATTACH, PRAGMA, runaway or oversized queries) or a text far longer than any answer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from rewards.common import SCAN_LIMIT, Score, completion_text, distinct_hits, fold
from rewards.sql_sandbox import execute

# A cut answer may hold a whole query (the part an analyst runs), never a whole explanation, and
# the analyst must find where the answer stops.
CUT_KEEPS = 0.7
W_MATCH, W_RUNS, W_STRUCTURE, W_QUERY_AND_EXPLANATION, W_NUMBERS, W_DOMAIN = (
    0.40, 0.10, 0.15, 0.15, 0.10, 0.10,
)  # fmt: skip
WRONG_RESULT_KEEPS = 0.5
# A query that returns the gold number among extra columns (e.g. state + count for a count
# question) found the answer but did not answer exactly what was asked.
PARTIAL_MATCH = 0.5
KEYWORDS_FOR_FULL_STRUCTURE = 3
DOMAIN_WORDS_FOR_FULL_CREDIT = 3
# Prose outside the query must be a sentence or so, not a stray word.
MIN_EXPLANATION_WORDS = 6
# Results are compared at the precision of the gold SQL (ROUND(x, 2)).
DECIMALS = 2

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
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")

# The seed's hotfix grew this list from 10 to 30 words after the audit showed SQL answers in good
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


COMPONENTS = ("match", "runs", "structure", "query_and_explanation", "numbers", "domain")


def score(
    completion: Any,
    database: Any = None,
    gold_answer: Any = None,
    gold_sql: Any = None,
) -> Score:
    text = completion_text(completion)
    if len(text) > SCAN_LIMIT:
        return Score(0.0, dict.fromkeys(COMPONENTS, 0.0))  # a flood, not an answer
    lowered = text.lower()
    keywords = sum(1 for pattern in _KEYWORD_PATTERNS if pattern.search(lowered))
    span = find_query(text)
    prose = f"{text[: span[0]]} {text[span[1] :]}" if span else text
    prose_words = len(re.findall(r"[^\W\d_]{2,}", prose))
    runs, match = 0.0, 0.0
    # With a database and a gold result, the answer is judged right or wrong.
    gold = gold_rows(database, gold_answer, gold_sql) if database else None
    if span and database:
        run = execute(database, text[span[0] : span[1]])
        if run.refused:
            return Score(0.0, dict.fromkeys(COMPONENTS, 0.0))
        if run.ok:
            runs = 1.0
            match = result_match(run.rows or [], gold) if gold is not None else 0.0
    components = {
        "match": W_MATCH * match,
        "runs": W_RUNS * runs,
        "structure": W_STRUCTURE
        * min(keywords, KEYWORDS_FOR_FULL_STRUCTURE)
        / KEYWORDS_FOR_FULL_STRUCTURE,
        "query_and_explanation": W_QUERY_AND_EXPLANATION
        if span and prose_words >= MIN_EXPLANATION_WORDS
        else 0.0,
        "numbers": W_NUMBERS if _NUMBER.search(prose) else 0.0,
        "domain": W_DOMAIN
        * min(distinct_hits(fold(prose), DOMAIN_STEMS), DOMAIN_WORDS_FOR_FULL_CREDIT)
        / DOMAIN_WORDS_FOR_FULL_CREDIT,
    }
    if gold is not None and match == 0.0:
        components = {name: WRONG_RESULT_KEEPS * value for name, value in components.items()}
    return Score(sum(components.values()), components)
