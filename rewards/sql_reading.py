"""What an answer's query computes, and whether its result and its explanation can be trusted.

Two ways an SQL answer can look right and be wrong, each read from the query's text:

- it assumes its answer: the query reads no table, selects a constant, or filters on a value of
  the gold answer that the question does not name ("Qual estado tem mais pedidos?" answered by
  `SELECT customer_state ... WHERE customer_state = 'SP'`). Its result is the gold only because
  the writer put it there: it computes nothing a retailer could rerun on new data;
- its explanation says the query computes something it does not: an average called a total (or
  a total an average), items called orders (or orders items), a late rate called an on-time rate
  (or the reverse), a filter named that the query does not have (a year, a state, delivered
  orders). A reader takes the prose for what the number means.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rewards.common import clauses_of, cues_said, fold

_STRING = re.compile(r"'((?:[^']|'')*)'")
_SELECT_LIST = re.compile(r"\bselect\b(.*?)\bfrom\b", re.IGNORECASE | re.DOTALL)
_FROM = re.compile(r"\bfrom\b", re.IGNORECASE)
_LITERAL_ITEM = re.compile(
    r"^\s*(?:'(?:[^']|'')*'|-?\d+(?:\.\d+)?)\s*(?:as\s+\w+|\w+)?\s*$", re.IGNORECASE
)
_AGGREGATE = re.compile(r"\b(count|sum|avg|max|min)\s*\(", re.IGNORECASE)
_COUNT_DISTINCT_ORDER = re.compile(r"count\s*\(\s*distinct\s+[\w.]*order_id", re.IGNORECASE)
_ITEMS_TABLE = re.compile(r"\bfrom\s+order_items\b", re.IGNORECASE)
# A delivery compared with its estimate: late one way, on time the other.
_LATE = re.compile(
    r"order_delivered_customer_date\s*>\s*[\w.]*order_estimated_delivery_date"
    r"|order_estimated_delivery_date\s*<\s*[\w.]*order_delivered_customer_date",
    re.IGNORECASE,
)
_ON_TIME = re.compile(
    r"order_delivered_customer_date\s*<=?\s*[\w.]*order_estimated_delivery_date"
    r"|order_estimated_delivery_date\s*>=?\s*[\w.]*order_delivered_customer_date",
    re.IGNORECASE,
)
_DELIVERED = re.compile(r"'delivered'|order_delivered_customer_date", re.IGNORECASE)
# A year, not the start of a number ("2009,34"): as rewards/numbers.py reads dates.
_YEAR = re.compile(r"(?<![\d.,])(?:19|20)\d{2}(?!\d|[.,]\d)")
_STATE = re.compile(r"(?<![\w])[A-Z]{2}(?![\w])")

# The prose's words for what a query computes, folded.
AVERAGE_WORDS = ("media", "medio", "em media")
TOTAL_WORDS = ("total", "soma", "somad", "somando")
MONEY_WORDS = ("valor", "pago", "receita", "faturament", "frete", "preco", "r")
ON_TIME_WORDS = ("no prazo", "dentro do prazo", "pontual", "em dia", "antes do prazo", "na data")
LATE_WORDS = (
    "atras", "depois da data", "depois do prazo", "fora do prazo", "apos o prazo", "apos a data",
    "passou do prazo", "depois da previsao",
)  # fmt: skip
DELIVERED_WORDS = ("entregue", "entregues")
# Brazil's states: an upper-case pair in the prose that is one names a filter.
STATES = frozenset(
    [
        "AC",
        "AL",
        "AP",
        "AM",
        "BA",
        "CE",
        "DF",
        "ES",
        "GO",
        "MA",
        "MT",
        "MS",
        "MG",
        "PA",
        "PB",
        "PR",
        "PE",
        "PI",
        "RJ",
        "RN",
        "RS",
        "RO",
        "RR",
        "SC",
        "SP",
        "SE",
        "TO",
    ]
)


@dataclass(frozen=True)
class Query:
    """What a query's text says it computes."""

    text: str
    reads_a_table: bool
    selects_a_constant: bool
    strings: frozenset[str]  # its string literals, lower case
    aggregates: frozenset[str]  # count, sum, avg, max, min
    counts_items: bool  # COUNT over order_items rows, not distinct orders
    counts_orders: bool
    late: bool  # compares delivery with the estimate, counting the late ones
    on_time: bool
    delivered_only: bool
    years: frozenset[str]


def _top_level_items(select_list: str) -> list[str]:
    items, depth, current = [], 0, []
    for ch in select_list:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    items.append("".join(current))
    return items


def read_query(sql: str) -> Query:
    select_list = _SELECT_LIST.search(sql)
    items = _top_level_items(select_list.group(1)) if select_list else []
    aggregates = frozenset(match.group(1).lower() for match in _AGGREGATE.finditer(sql))
    counts = "count" in aggregates
    items_counted = (
        counts and bool(_ITEMS_TABLE.search(sql)) and not _COUNT_DISTINCT_ORDER.search(sql)
    )
    return Query(
        text=sql,
        reads_a_table=bool(_FROM.search(sql)),
        selects_a_constant=any(_LITERAL_ITEM.match(item) for item in items),
        strings=frozenset(s.replace("''", "'").lower() for s in _STRING.findall(sql)),
        aggregates=aggregates,
        counts_items=items_counted,
        counts_orders=counts and not items_counted,
        late=bool(_LATE.search(sql)),
        on_time=bool(_ON_TIME.search(sql)) and not _LATE.search(sql),
        delivered_only=bool(_DELIVERED.search(sql)),
        years=frozenset(_YEAR.findall(" ".join(_STRING.findall(sql)))),
    )


def assumes_answer(
    query: Query, gold: Sequence[Sequence[Any]], question: str | None, gold_sql: str | None
) -> bool:
    """Whether the query's result is the gold only because it was written into the query: no
    table read, a constant selected, or a filter on a value of the gold answer that neither the
    question nor the gold query names."""
    if not query.reads_a_table or query.selects_a_constant:
        return True
    named = fold(question or "") + " " + (gold_sql or "").lower()
    answers = {
        str(cell).strip().lower()
        for row in gold
        for cell in row
        if isinstance(cell, str) and cell.strip()
    }
    return any(value in query.strings and fold(value) not in named for value in answers)


def _says(prose: str, cues: tuple[str, ...]) -> bool:
    said, _ = cues_said(clauses_of(prose), cues)
    return said


def misdescribed(
    prose: str, query: Query, rows: Sequence[Sequence[Any]], question: str | None
) -> list[str]:
    """What the explanation says the query computes that it does not: each kind once."""
    folded = fold(prose)
    words = set(re.findall(r"[a-z]+", folded))
    found = []
    averages = "avg" in query.aggregates or ("sum" in query.aggregates and "/" in query.text)
    if _says(prose, AVERAGE_WORDS) and not averages and query.aggregates:
        found.append("an average")
    if (
        _says(prose, TOTAL_WORDS)
        and "avg" in query.aggregates
        and "sum" not in query.aggregates
        and any(w.startswith(MONEY_WORDS) for w in words)
    ):
        found.append("a total")
    if query.counts_items and re.search(r"\d[\d.,]*\s+pedidos\b", folded):
        found.append("orders")
    if (
        query.counts_orders
        and re.search(r"\d[\d.,]*\s+itens\b", folded)
        and "itens" not in fold(question or "")
    ):
        found.append("items")
    late_said, on_time_said = _says(prose, LATE_WORDS), _says(prose, ON_TIME_WORDS)
    if query.late and on_time_said and not late_said:
        found.append("on time")
    if query.on_time and late_said and not on_time_said:
        found.append("late")
    result = {str(cell).lower() for row in rows for cell in row}
    filters = query.strings | result
    asked = fold(question or "")
    years = set(_YEAR.findall(prose)) - set(_YEAR.findall(asked))
    if any(year not in query.years and year not in filters for year in years):
        found.append("a year")
    # What the question names is the prose restating it; a query that misses it is wrong, which
    # the match already says.
    states = {s for s in _STATE.findall(prose) if s in STATES} - set(_STATE.findall(question or ""))
    if any(state.lower() not in filters for state in states):
        found.append("a state")
    if _says(prose, DELIVERED_WORDS) and not query.delivered_only and "entreg" not in asked:
        found.append("delivered orders")
    return found
