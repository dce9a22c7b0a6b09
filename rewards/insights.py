"""Data summary -> strategic analysis. The seed's V4.2.1 rule.

Action words 0.40 (three distinct for full credit), length 100-800 characters 0.30 (a ramp below
100 and a decay to zero at 1,600 above 800), structure marks 0.20 (bullets, numbered items,
headers: two for full credit), domain mention 0.10.

Beyond the seed, grounding: when the row carries its data summary, citing numbers that are in it
earns up to 0.20 (three for full credit) and the share of cited numbers that are not in it costs up
to 0.50; the seed's parts then share the other 0.80. An analysis that invents figures is worse
than one that cites none: its recommendations rest on numbers that are not there.
"""

from __future__ import annotations

import re
from typing import Any

from rewards.common import SCAN_LIMIT, Score, clamp01, completion_text, distinct_hits, fold

W_ACTION, W_LENGTH, W_STRUCTURE, W_DOMAIN = 0.40, 0.30, 0.20, 0.10
# A cut analysis loses its end, where the recommendation a reader acts on usually is.
CUT_KEEPS = 0.6
W_GROUNDED, UNGROUNDED_PENALTY = 0.20, 0.50
GROUNDED_FOR_FULL_CREDIT = 3
COMPONENTS = ("action", "length", "structure", "domain", "grounding")
ACTIONS_FOR_FULL_CREDIT = 3
STRUCTURE_MARKS_FOR_FULL_CREDIT = 2
MIN_CHARS, MAX_CHARS = 100, 800
# Twice the maximum: an analysis that long is padding, not insight.
ZERO_LENGTH_CREDIT_AT = 1_600

ACTION_STEMS = (
    "recomend", "sugir", "suger", "implement", "prioriz", "priorit", "melhor", "invest",
    "reduz", "aument", "otimiz", "revis", "negoci", "monitor", "expand", "ampli", "criar",
    "oferec", "focar", "foco", "ajust", "acompanh", "trein", "lanc",
)  # fmt: skip
DOMAIN_STEMS = (
    "cliente", "produto", "pedido", "entrega", "vendedor", "categori", "frete", "venda",
    "avaliac", "nota", "estado", "regiao", "logistic", "ticket", "receita",
)  # fmt: skip
_STRUCTURE_LINE = re.compile(r"^\s*(?:[-*•]\s|\d+[.)]\s|#{1,6}\s|\*\*[^*\n]+\*\*)", re.MULTILINE)
# A number as written in Portuguese or English: 1.210 | 1,210 | 14,8 | 118.20 | 4,1% ...
_NUMBER = re.compile(
    r"(?<![\w.,])\d{1,3}(?:[.,]\d{3})+(?:[.,]\d+)?(?![\w])|(?<![\w.,])\d+(?:[.,]\d+)?"
)
# Numbered-list markers ("1. ", "2) ") are layout, not claims about the data.
_LIST_MARKER = re.compile(r"^\s*\d+[.)]\s", re.MULTILINE)


def number_readings(token: str) -> set[float]:
    """Every value a written number can mean: '1.210' is 1210 (pt-BR) or 1.21 (en)."""
    readings = set()
    for thousands, decimal in ((".", ","), (",", ".")):
        integer, _, fraction = token.partition(decimal)
        groups = integer.split(thousands)
        # A second decimal mark ("9,671,454" read with "," as the decimal) or a group of other
        # than three digits: not a number under this convention.
        if thousands in fraction or decimal in fraction or any(len(g) != 3 for g in groups[1:]):
            continue
        readings.add(round(float("".join(groups) + (f".{fraction}" if fraction else "")), 2))
    return readings


def cited_numbers(text: str) -> list[set[float]]:
    return [number_readings(m.group()) for m in _NUMBER.finditer(_LIST_MARKER.sub(" ", text))]


def grounding(text: str, data_summary: str) -> float:
    """Credit for numbers found in the summary minus a penalty for the share that are not."""
    known = set().union(*cited_numbers(data_summary[:SCAN_LIMIT]))
    cited = cited_numbers(text[:SCAN_LIMIT])
    if not cited:
        return 0.0
    grounded = sum(1 for readings in cited if readings & known)
    ungrounded_share = (len(cited) - grounded) / len(cited)
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


def score(completion: Any, data_summary: str | None = None) -> Score:
    text = completion_text(completion)
    folded = fold(text)
    if not folded.strip():
        return Score(0.0, dict.fromkeys(COMPONENTS, 0.0))
    marks = len(_STRUCTURE_LINE.findall(folded))
    share = 1.0 if not isinstance(data_summary, str) else 1.0 - W_GROUNDED
    components = {
        "action": W_ACTION
        * min(distinct_hits(folded, ACTION_STEMS), ACTIONS_FOR_FULL_CREDIT)
        / ACTIONS_FOR_FULL_CREDIT,
        "length": W_LENGTH * length_credit(len(text.strip())),
        "structure": W_STRUCTURE
        * min(marks, STRUCTURE_MARKS_FOR_FULL_CREDIT)
        / STRUCTURE_MARKS_FOR_FULL_CREDIT,
        "domain": W_DOMAIN if distinct_hits(folded, DOMAIN_STEMS) else 0.0,
    }
    components = {name: share * value for name, value in components.items()}
    if isinstance(data_summary, str):
        components["grounding"] = grounding(text, data_summary)
    return Score(clamp01(sum(components.values())), components)
