"""What every scorer shares: the result type, bounded text handling, Portuguese word matching,
and what makes an answer that loops no better than the same answer said once."""

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


# Portuguese negation: a cue one or two words after one of these says the opposite ("não veio
# quebrado", "sem nenhum defeito"); a cue that carries its own ("não recebi") is matched whole.
NEGATORS = ("nao", "sem", "nunca", "nenhum", "nenhuma", "nem")
NEGATION_REACH = 2
# A negation of the need, not of the cue after it: "nem precisei trocar" says the customer needed
# no exchange, not that the seller refused one.
NEED_STEMS = ("precis", "necessit")
_CLAUSE_END = re.compile(r"[.,;:!?\n]+")


# "Não" as customers type it in a hurry: "n recebi", "ñ retornam" ("ñ" folds to "n"); before a
# number it is "número" ("pedido n 4521"), which a negation would turn into its opposite.
NAO_SHORTHAND = "n"


def _nao_written_whole(words: list[str]) -> list[str]:
    return [
        "nao"
        if word == NAO_SHORTHAND and not (k + 1 < len(words) and words[k + 1].isdigit())
        else word
        for k, word in enumerate(words)
    ]


def clauses_of(text: str | None) -> list[list[str]]:
    """The text's clauses as folded words, "não" whole where it was typed short: a negation does
    not reach past a comma or a stop."""
    return [
        _nao_written_whole(WORD.findall(clause)) for clause in _CLAUSE_END.split(fold(text or ""))
    ]


def _cue_in(words: list[str], cue: str) -> tuple[bool, bool]:
    """(said, negated): whether `cue` (a phrase of word prefixes) begins at some word, and whether
    every such place is negated by a word just before it."""
    first, *rest = cue.split()
    parts = (first, *rest)
    said = negated_everywhere = False
    for start in range(len(words) - len(rest)):
        # The first word alone rules out most places: the rest is read only where it matches.
        if words[start].startswith(first) and all(
            words[start + k].startswith(part) for k, part in enumerate(rest, start=1)
        ):
            window = words[max(0, start - NEGATION_REACH) : start]
            negators = [k for k, word in enumerate(window) if word in NEGATORS]
            negated = (
                parts[0] not in NEGATORS
                and bool(negators)
                and not any(word.startswith(NEED_STEMS) for word in window[negators[-1] :])
            )
            negated_everywhere = negated if not said else negated_everywhere and negated
            said = True
    return said, said and negated_everywhere


def cues_said(clauses: list[list[str]], cues: tuple[str, ...]) -> tuple[bool, bool]:
    """(some cue said as it is, some cue said only under a negation), clause by clause
    ("sem defeito, recomendo" says "recomendo")."""
    found = []
    for words in clauses:
        # A cue's first word begins some word of the clause only where " first" is in the clause
        # written out: one substring search rules out most cues without reading a word.
        spaced = " " + " ".join(words)
        found += [_cue_in(words, cue) for cue in cues if " " + cue.split(None, 1)[0] in spaced]
    return any(s and not n for s, n in found), any(n for _, n in found)


def distinct_hits(folded: str, stems: tuple[str, ...]) -> int:
    """How many of the stems begin some word of the (folded) text."""
    words = set(WORD.findall(folded))
    return sum(1 for stem in stems if any(word.startswith(stem) for word in words))


# A repeated unit: a line, or a sentence within a line. Its first instance is the answer; the
# copies are what a model that never learned to stop writes until the token budget cuts it.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _unit_key(unit: str) -> str:
    return " ".join(WORD.findall(fold(unit)))


def first_instance(text: str) -> str:
    """The text with every repeated line, and every repeated sentence within a line, dropped
    after its first instance, and a last unit that only begins an earlier one (where a loop was
    cut). Units are compared by their words, accent- and case-folded; a unit without words
    (a fence, a brace) is kept."""
    lines = text[:SCAN_LIMIT].split("\n")
    units = [
        (number, unit) for number, line in enumerate(lines) for unit in _SENTENCE_END.split(line)
    ]
    seen: set[str] = set()
    kept: list[list[str]] = [[] for _ in lines]
    for position, (number, unit) in enumerate(units):
        key = _unit_key(unit)
        cut_copy = position == len(units) - 1 and any(earlier.startswith(key) for earlier in seen)
        if key and (key in seen or cut_copy):
            continue
        seen.add(key)
        kept[number].append(unit)
    return "\n".join(
        " ".join(units_kept)
        for units_kept, line in zip(kept, lines, strict=True)
        if units_kept or not line.strip()
    )


# n-grams of words: six words again is a loop, not Portuguese's ordinary recurring phrases.
REPETITION_NGRAM = 6


def repeated_share(text: str) -> float:
    """The share of the text's word 6-grams that repeat an earlier one: 0 for an answer said
    once, near 1 for one said over and over. TRL's repetition measure
    (`trl.rewards.get_repetition_penalty_reward`: 1 - unique n-grams / n-grams), on accent-folded
    words rather than one tokenizer's ids; written here rather than imported because importing
    trl would load it before Unsloth in a GPU run, which Unsloth must precede (tests/
    test_rewards.py holds the two equal)."""
    words = WORD.findall(fold(text))
    ngrams = list(zip(*(words[start:] for start in range(REPETITION_NGRAM)), strict=False))
    return 1 - len(set(ngrams)) / len(ngrams) if ngrams else 0.0
