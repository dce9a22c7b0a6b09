"""Data summary -> strategic analysis, judged on whether what it says of the data is true.

V4.2.1's rule judged the form only: action words 0.40 (three distinct for full credit),
length 100-800 characters 0.30 (a ramp below 100 and a decay to zero at 1,600 above 800),
structure marks 0.20 (bullets, numbered items, headers: two for full credit), domain mention
0.10. It paid an analysis that names the wrong group as the most delayed as much as the right
one. Without a data summary (a log line with no context) that form is still the whole score.

With the summary, the form is worth W_FORM and the rest is what the analysis says of the data:

- claims, W_CLAIMS: each statement about a group of the summary's table (its value of a column,
  "o maior"/"a menor"/"o pior", a comparison, a share: rewards/table_claims.py) is held to the
  table; true ones earn (three for full credit), and each false one keeps FALSE_CLAIM_KEEPS of
  the total, so a false claim costs more than saying nothing: a retailer acts on it;
- grounding, W_GROUNDED: citing numbers that are in the summary earns (three for full credit),
  and the share of cited numbers that are not in it costs up to UNGROUNDED_PENALTY; dates and
  years are when, not figures, and count as neither;
- an analysis that names none of the table's groups and cites none of its numbers keeps
  GENERIC_KEEPS: it could be about any data;
- the focus the prompt asks for (`analysis_focus`: logistics, satisfaction, marketing,
  retention, problems) is served when the analysis speaks of the metrics that focus is about
  (logistics: delay and freight; satisfaction: ratings; ...); one that speaks of none of them
  keeps FOCUS_IGNORED_KEEPS, one that speaks of part proportionally more. A focus none of the
  words below names (a log's own) is not judged.

An answer in another task's form, a JSON object, scores 0 however many of the summary's numbers it
copies (an extraction object written for a summary is no analysis).
"""

from __future__ import annotations

import re
from typing import Any

from rewards.common import SCAN_LIMIT, Score, clamp01, completion_text, distinct_hits, fold
from rewards.extraction import parse_json_object
from rewards.numbers import values
from rewards.table_claims import (
    ACTION_STEMS,
    METRIC_WORDS,
    Claim,
    Table,
    figures,
    groups_named,
    parse_table,
    read_claims,
    targeted_actions,
)

W_ACTION, W_LENGTH, W_STRUCTURE, W_DOMAIN = 0.40, 0.30, 0.20, 0.10
# A cut analysis loses its end, where the recommendation a reader acts on usually is.
CUT_KEEPS = 0.6
# With the data summary: what the analysis says of the data, and whether its advice is where
# the data points, outweigh how it is laid out.
W_FORM, W_GROUNDED, W_CLAIMS, W_TARGETED = 0.35, 0.10, 0.35, 0.20
# A reading of the table (the most delayed group, one compared with another) is what a claim
# earns for; a value copied beside its group is the evidence of a reading, worth half of one,
# and restating the table earns no more than one reading (a copy is no analysis).
VALUE_WEIGHT, VALUES_AT_MOST = 0.5, 1.0
TARGETED_FOR_FULL_CREDIT = 2
UNGROUNDED_PENALTY = 0.50
# A false statement about the data is one a retailer acts on: it costs what a missed complaint
# does in extraction, for each one.
FALSE_CLAIM_KEEPS = 0.6
CLAIMS_FOR_FULL_CREDIT = 3
# With its data summary at hand, an analysis that names none of it could be about any data: the
# total keeps this share.
GENERIC_KEEPS = 0.6
# An analysis of the wrong thing answers another question, however true: half.
FOCUS_IGNORED_KEEPS = 0.5
GROUNDED_FOR_FULL_CREDIT = 3
COMPONENTS = (
    "action", "length", "structure", "domain", "grounding", "claims", "targeted", "false_claims",
    "generic", "focus",
)  # fmt: skip
ACTIONS_FOR_FULL_CREDIT = 3
STRUCTURE_MARKS_FOR_FULL_CREDIT = 2
MIN_CHARS, MAX_CHARS = 100, 800
_FENCE = re.compile(r"```(?:json)?", re.IGNORECASE)
# Twice the maximum: an analysis that long is padding, not insight.
ZERO_LENGTH_CREDIT_AT = 1_600

DOMAIN_STEMS = (
    "cliente", "produto", "pedido", "entrega", "vendedor", "categori", "frete", "venda",
    "avaliac", "nota", "estado", "regiao", "logistic", "ticket", "receita",
)  # fmt: skip
_STRUCTURE_LINE = re.compile(r"^\s*(?:[-*•]\s|\d+[.)]\s|#{1,6}\s|\*\*[^*\n]+\*\*)", re.MULTILINE)

# What each focus is about: the words of a focus that name it, and the metrics it needs spoken
# of (each tuple one need, any of its metrics meets it). Checked in order; every entry a focus's
# words name adds its needs.
FOCUSES: tuple[tuple[tuple[str, ...], tuple[tuple[str, ...], ...]], ...] = (
    (("logistic", "prazo", "atras", "frete"), (("late",), ("freight",))),
    (("satisf", "avaliac"), (("rating",),)),
    (("marketing", "sortiment", "invest"), (("orders", "ticket", "revenue"),)),
    (("reengaj", "retenc", "recompra", "fideliz"), (("rating", "late"),)),
    (("problema",), (("late", "rating"),)),
)
# How an analysis speaks of a metric, beyond the table's own words: lateness is also told as
# deadlines and carriers.
SPOKEN_OF: dict[str, tuple[str, ...]] = {
    **METRIC_WORDS,
    "late": (*METRIC_WORDS["late"], "prazo", "transportador", "logistic"),
}


def cited(text: str, data_summary: str) -> tuple[int, int]:
    """(how many of the figures the text cites are in the summary, how many it cites)."""
    known = values(data_summary[:SCAN_LIMIT])
    numbers = figures(text[:SCAN_LIMIT])
    return sum(1 for readings in numbers if {r.value for r in readings} & known), len(numbers)


def grounding(grounded: int, cited_numbers: int) -> float:
    """Credit for numbers found in the summary minus a penalty for the share that are not."""
    if not cited_numbers:
        return 0.0
    ungrounded_share = (cited_numbers - grounded) / cited_numbers
    return (
        W_GROUNDED * min(grounded, GROUNDED_FOR_FULL_CREDIT) / GROUNDED_FOR_FULL_CREDIT
        - UNGROUNDED_PENALTY * ungrounded_share
    )


def length_credit(length: int) -> float:
    if length < MIN_CHARS:
        return length / MIN_CHARS
    if length <= MAX_CHARS:
        return 1.0
    return max(0.0, (ZERO_LENGTH_CREDIT_AT - length) / (ZERO_LENGTH_CREDIT_AT - MAX_CHARS))


def another_task(text: str) -> bool:
    """The answer is a JSON object (in a fence or not), another task's form."""
    bare = _FENCE.sub("", text).strip()
    return bare.startswith("{") and parse_json_object(bare)[0] is not None


def focus_needs(focus: str, table: Table) -> list[tuple[str, ...]]:
    """The needs of a focus that the table can meet: each a tuple of metrics, any of which
    does."""
    folded = fold(focus)
    needs = [
        need for words, needed in FOCUSES if any(w in folded for w in words) for need in needed
    ]
    return [kept for need in needs if (kept := tuple(m for m in need if m in table.metrics))]


def focus_served(text: str, focus: str, table: Table) -> float | None:
    """The share of the focus's needs the analysis speaks of; None for a focus not judged."""
    needs = focus_needs(focus, table)
    if not needs:
        return None
    words = re.findall(r"[a-z]+", fold(text))

    def spoken(metric: str) -> bool:
        stems = tuple(stem.split()[0] for stem in SPOKEN_OF.get(metric, (metric[:5],)))
        return any(word.startswith(stems) for word in words)

    return sum(any(spoken(m) for m in need) for need in needs) / len(needs)


def judges_focus(focus: str, data_summary: str) -> bool:
    """Whether the reward holds an analysis to this focus on this summary (it names a metric of
    the table the reward knows)."""
    table = parse_table(data_summary[:SCAN_LIMIT])
    return table is not None and bool(focus_needs(focus, table))


def claims_credit(claims: list[Claim]) -> float:
    """The share of full credit the true claims earn: readings of the table whole, values
    beside their groups half each and one reading's worth at most."""
    readings = sum(claim.true and claim.kind != "value" for claim in claims)
    values = sum(claim.true and claim.kind == "value" for claim in claims)
    earned = readings + min(VALUES_AT_MOST, VALUE_WEIGHT * values)
    return min(earned, CLAIMS_FOR_FULL_CREDIT) / CLAIMS_FOR_FULL_CREDIT


def claims_of(completion: Any, data_summary: str | None) -> list[Claim] | None:
    """What the analysis claims about its summary's table; None without a table to hold it to."""
    table = parse_table(data_summary[:SCAN_LIMIT]) if isinstance(data_summary, str) else None
    if table is None:
        return None
    return read_claims(completion_text(completion)[:SCAN_LIMIT], table)


def _form(text: str, folded: str) -> dict[str, float]:
    marks = len(_STRUCTURE_LINE.findall(folded))
    return {
        "action": W_ACTION
        * min(distinct_hits(folded, ACTION_STEMS), ACTIONS_FOR_FULL_CREDIT)
        / ACTIONS_FOR_FULL_CREDIT,
        "length": W_LENGTH * length_credit(len(text.strip())),
        "structure": W_STRUCTURE
        * min(marks, STRUCTURE_MARKS_FOR_FULL_CREDIT)
        / STRUCTURE_MARKS_FOR_FULL_CREDIT,
        "domain": W_DOMAIN if distinct_hits(folded, DOMAIN_STEMS) else 0.0,
    }


def score(
    completion: Any, data_summary: str | None = None, analysis_focus: str | None = None
) -> Score:
    text = completion_text(completion)
    folded = fold(text)
    if not folded.strip() or another_task(text):
        return Score(0.0, dict.fromkeys(COMPONENTS, 0.0))
    form = _form(text, folded)
    if not isinstance(data_summary, str):
        return Score(clamp01(sum(form.values())), form)
    table = parse_table(data_summary[:SCAN_LIMIT])
    claims = read_claims(text[:SCAN_LIMIT], table) if table else []
    false = sum(not claim.true for claim in claims)
    form_share = W_FORM if table else 1 - W_GROUNDED
    components = {name: form_share * value for name, value in form.items()}
    grounded, cited_numbers = cited(text, data_summary)
    components["grounding"] = grounding(grounded, cited_numbers)
    components["claims"] = W_CLAIMS * claims_credit(claims)
    components["targeted"] = (
        W_TARGETED
        * min(targeted_actions(text[:SCAN_LIMIT], table), TARGETED_FOR_FULL_CREDIT)
        / TARGETED_FOR_FULL_CREDIT
        if table
        else 0.0
    )
    subtotal = clamp01(sum(components.values()))
    components["false_claims"] = -(1 - FALSE_CLAIM_KEEPS**false) * subtotal
    subtotal += components["false_claims"]
    names_the_data = grounded or (table is not None and groups_named(text[:SCAN_LIMIT], table))
    components["generic"] = -(1 - GENERIC_KEEPS) * subtotal if not names_the_data else 0.0
    subtotal += components["generic"]
    served = (
        focus_served(text, analysis_focus, table)
        if table is not None and isinstance(analysis_focus, str)
        else None
    )
    keeps = 1.0 if served is None else FOCUS_IGNORED_KEEPS + (1 - FOCUS_IGNORED_KEEPS) * served
    components["focus"] = -(1 - keeps) * subtotal
    return Score(clamp01(subtotal + components["focus"]), components)
