"""Data summary -> strategic analysis. The seed's V4.2.1 rule.

Action words 0.40 (three distinct for full credit), length 100-800 characters 0.30 (a ramp below
100 and a decay to zero at 1,600 above 800), structure marks 0.20 (bullets, numbered items,
headers: two for full credit), domain mention 0.10.
"""

from __future__ import annotations

import re
from typing import Any

from rewards.common import Score, completion_text, distinct_hits, fold

W_ACTION, W_LENGTH, W_STRUCTURE, W_DOMAIN = 0.40, 0.30, 0.20, 0.10
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


def length_credit(length: int) -> float:
    if length < MIN_CHARS:
        return length / MIN_CHARS
    if length <= MAX_CHARS:
        return 1.0
    return max(0.0, (ZERO_LENGTH_CREDIT_AT - length) / (ZERO_LENGTH_CREDIT_AT - MAX_CHARS))


def score(completion: Any, **_: Any) -> Score:
    text = completion_text(completion)
    folded = fold(text)
    if not folded.strip():
        return Score(0.0, {"action": 0.0, "length": 0.0, "structure": 0.0, "domain": 0.0})
    marks = len(_STRUCTURE_LINE.findall(folded))
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
    return Score(sum(components.values()), components)
