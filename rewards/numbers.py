"""Numbers as Brazilians and English speakers write them, read out of an answer's prose.

"1.210" is 1210 to a Brazilian and 1.21 in English; "14,8" is 14.8. A written number keeps every
reading a convention allows, with the decimals it was written to, so that a claim can be held to
a value at the precision the writer chose ("12 dias" for 12.04, "14,8%" for 14.83).
"""

from __future__ import annotations

import re
from typing import NamedTuple

# A number as written in Portuguese or English: 1.210 | 1,210 | 14,8 | 118.20 | 4,1% ...
NUMBER = re.compile(
    r"(?<![\w.,])\d{1,3}(?:[.,]\d{3})+(?:[.,]\d+)?(?![\w])|(?<![\w.,])\d+(?:[.,]\d+)?"
)
# A date or a year is when, not how much: "11/2017", "2018-03", "03/11/2018", "em 2018".
DATE = re.compile(
    r"\d{1,2}/\d{1,2}/\d{2,4}|\d{1,2}/\d{4}|\d{4}-\d{1,2}(?:-\d{1,2})?"
    r"|(?<!\d)(?<!\d[.,])(?:19|20)\d{2}(?!\d|[.,]\d)"
)
# Numbered-list markers ("1. ", "2) ") are layout, not claims about the data.
_LIST_MARKER = re.compile(r"^\s*\d+[.)]\s", re.MULTILINE)
# The precision values are compared at: the gold SQL rounds to two decimals (ROUND(x, 2)).
DECIMALS = 2


class Reading(NamedTuple):
    value: float  # rounded to DECIMALS
    decimals: int  # as written, at most DECIMALS


def number_readings(token: str) -> set[Reading]:
    """Every value a written number can mean: '1.210' is 1210 (pt-BR) or 1.21 (en)."""
    readings = set()
    for thousands, decimal in ((".", ","), (",", ".")):
        integer, _, fraction = token.partition(decimal)
        groups = integer.split(thousands)
        # A second decimal mark ("9,671,454" read with "," as the decimal) or a group of other
        # than three digits: not a number under this convention.
        if thousands in fraction or decimal in fraction or any(len(g) != 3 for g in groups[1:]):
            continue
        value = float("".join(groups) + (f".{fraction}" if fraction else ""))
        readings.add(Reading(round(value, DECIMALS), min(len(fraction), DECIMALS)))
    return readings


class WrittenNumber(NamedTuple):
    start: int
    end: int
    readings: set[Reading]


def _blanked(pattern: re.Pattern[str], text: str) -> str:
    return pattern.sub(lambda match: " " * len(match.group()), text)


def number_spans(text: str) -> list[WrittenNumber]:
    """Each number in the text where it is written, with its readings; list markers and dates
    are left out (blanked, so that positions stay those of the text)."""
    plain = _blanked(DATE, _blanked(_LIST_MARKER, text))
    return [
        WrittenNumber(m.start(), m.end(), number_readings(m.group()))
        for m in NUMBER.finditer(plain)
    ]


def written_numbers(text: str) -> list[set[Reading]]:
    """The readings of each number in the text, list markers and dates left out."""
    return [number.readings for number in number_spans(text)]


def values(text: str) -> set[float]:
    """Every value the text's numbers can mean."""
    return {reading.value for readings in written_numbers(text) for reading in readings}


def agrees(reading: Reading, value: float) -> bool:
    """Whether a written number states `value` at the precision it was written to."""
    return round(value, reading.decimals) == round(reading.value, reading.decimals)
