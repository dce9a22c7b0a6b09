"""What every scorer shares: the result type, bounded text handling, Portuguese word matching."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

# Scorers look at no more than this many characters, so any input is scored in bounded time.
# Far above any useful completion (512 tokens is ~2,500 characters); lengths are still measured
# on the whole text, so a 100 MB answer is judged as long, not as its first 20,000 characters.
SCAN_LIMIT = 20_000


@dataclass(frozen=True)
class Score:
    total: float
    components: dict[str, float] = field(default_factory=dict)


def clamp01(value: float) -> float:
    return 0.0 if value != value else min(1.0, max(0.0, value))  # NaN counts as 0


def completion_text(completion: Any) -> str:
    """TRL passes plain strings or chat messages; reduce both to the assistant's text."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return "".join(
            str(message.get("content", "")) if isinstance(message, dict) else str(message)
            for message in completion
        )
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    return "" if completion is None else str(completion)


def fold(text: str) -> str:
    """Lower case without accents, so 'Recomendação' and 'recomendacao' match alike."""
    decomposed = unicodedata.normalize("NFKD", text[:SCAN_LIMIT].lower())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


WORD = re.compile(r"[a-z0-9]+")


def distinct_hits(folded: str, stems: tuple[str, ...]) -> int:
    """How many of the stems begin some word of the (folded) text."""
    words = set(WORD.findall(folded))
    return sum(1 for stem in stems if any(word.startswith(stem) for word in words))
