"""Data summary -> strategic analysis. The seed's V4.2.1 rule.

Action words 0.40 (three distinct for full credit), length 100-800 characters 0.30 (a ramp below
100 and a decay to zero at 1,600 above 800), structure marks 0.20 (bullets, numbered items,
headers: two for full credit), domain mention 0.10.

An answer in another task's form, a JSON object, scores 0 however many of the summary's numbers it
copies (an extraction object written for a summary is no analysis).

Beyond the seed, grounding: when the row carries its data summary, citing numbers that are in it
earns up to 0.20 (three for full credit) and the share of cited numbers that are not in it costs up
to 0.50; the seed's parts then share the other 0.80. An analysis that invents figures is worse
than one that cites none: its recommendations rest on numbers that are not there. One that cites
none of them keeps GENERIC_KEEPS: it could be about any data. Dates and years are when, not
figures, and count as neither.
"""

from __future__ import annotations

import re
from typing import Any

from rewards.common import SCAN_LIMIT, Score, clamp01, completion_text, distinct_hits, fold
from rewards.extraction import parse_json_object
from rewards.numbers import values, written_numbers

W_ACTION, W_LENGTH, W_STRUCTURE, W_DOMAIN = 0.40, 0.30, 0.20, 0.10
# A cut analysis loses its end, where the recommendation a reader acts on usually is.
CUT_KEEPS = 0.6
W_GROUNDED, UNGROUNDED_PENALTY = 0.20, 0.50
# With its data summary at hand, an analysis that cites none of it could be about any data: the
# total keeps this share.
GENERIC_KEEPS = 0.6
GROUNDED_FOR_FULL_CREDIT = 3
COMPONENTS = ("action", "length", "structure", "domain", "grounding", "generic")
ACTIONS_FOR_FULL_CREDIT = 3
STRUCTURE_MARKS_FOR_FULL_CREDIT = 2
MIN_CHARS, MAX_CHARS = 100, 800
_FENCE = re.compile(r"```(?:json)?", re.IGNORECASE)
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


def cited(text: str, data_summary: str) -> tuple[int, int]:
    """(how many of the numbers the text cites are in the summary, how many it cites)."""
    known = values(data_summary[:SCAN_LIMIT])
    numbers = written_numbers(text[:SCAN_LIMIT])
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


def score(completion: Any, data_summary: str | None = None) -> Score:
    text = completion_text(completion)
    folded = fold(text)
    if not folded.strip() or another_task(text):
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
        grounded, cited_numbers = cited(text, data_summary)
        components["grounding"] = grounding(grounded, cited_numbers)
        subtotal = clamp01(sum(components.values()))
        components["generic"] = -(1 - GENERIC_KEEPS) * subtotal if not grounded else 0.0
    return Score(clamp01(sum(components.values())), components)
