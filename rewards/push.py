"""Context -> push notification of at most 120 characters. The seed's V4.2.1 rule, made to pay
for one sendable notification.

Length 0.50 up to 120 characters, decaying steeply to zero at 200 (the V4.2.1 hotfix: before it,
analytical essays about notifications still earned length credit). Portuguese markers 0.30,
creativity 0.20 (not a generic template), and -0.20 for formal-letter phrases. Beyond the seed:
the Portuguese and creativity credit is earned in proportion to the length credit (an essay in
good Portuguese about a notification is still no notification), and an answer of several
notifications (options on separate lines) keeps SEVERAL_KEEPS: someone still has to write the one
that is sent; one that a Brazilian customer would not read as a message (Spanish, shouting in
capitals, a string of hashtags) keeps UNSENDABLE_KEEPS.
"""

from __future__ import annotations

import re
from typing import Any

from rewards.common import Score, clamp01, completion_text, distinct_hits, fold

W_LENGTH, W_PORTUGUESE, W_CREATIVITY = 0.50, 0.30, 0.20
# A cut notification is broken text on a customer's phone: it cannot be sent as it is.
CUT_KEEPS = 0.25
FORMAL_PENALTY = 0.20
SEVERAL_KEEPS = 0.5
UNSENDABLE_KEEPS = 0.25
COMPONENTS = ("length", "portuguese", "creativity", "formal", "several", "unsendable")
# Words and marks Spanish has and Portuguese does not: two of them make a Spanish message.
SPANISH = ("tu", "llego", "ahora", "gana", "cupon", "usted", "nuestro", "nuestra", "envio", "hoy",
           "gracias", "compra ya", "aprovecha", "descuentos", "el", "los", "ya")  # fmt: skip
SPANISH_MARKS = ("¡", "¿")
SPANISH_FOR_A_MESSAGE = 2
# Shouting: most of the letters in capitals (a word or two in capitals is emphasis).
SHOUTING_SHARE = 0.6
MIN_LETTERS_TO_SHOUT = 12
MAX_CHARS, ZERO_CREDIT_AT = 120, 200
# "Pedido enviado." is bland but a notification; one word is not.
MIN_WORDS = 2

PORTUGUESE_STEMS = (
    "voce", "seu", "sua", "para", "com", "nao", "sem", "frete", "oferta", "desconto",
    "pedido", "chegou", "aproveit", "confir", "agora", "hoje", "compra", "produto", "esta",
)  # fmt: skip
_ACCENTED = re.compile(r"[áàâãéêíóôõúç]", re.IGNORECASE)
GENERIC_PHRASES = (
    "confira nossas ofertas", "nao perca", "clique aqui", "ofertas imperdiveis",
    "promocao imperdivel", "aproveite agora", "acesse nosso site", "confira agora",
)  # fmt: skip
FORMAL_PHRASES = ("prezado", "prezada", "atenciosamente", "cordialmente", "caro cliente")
# A line with words on it: a notification of its own.
WORD_LINE = re.compile(r"[^\W\d_]{2,}")


def length_credit(length: int) -> float:
    if length == 0:
        return 0.0
    if length <= MAX_CHARS:
        return 1.0
    return max(0.0, (ZERO_CREDIT_AT - length) / (ZERO_CREDIT_AT - MAX_CHARS))


def score(completion: Any) -> Score:
    text = completion_text(completion).strip()
    folded = fold(text)
    words = re.findall(r"[a-z]{2,}", folded)
    if len(words) < MIN_WORDS:
        return Score(0.0, dict.fromkeys(COMPONENTS, 0.0))
    portuguese = (
        0.5 * bool(_ACCENTED.search(text[: MAX_CHARS * 2]))
        + 0.5 * min(distinct_hits(folded, PORTUGUESE_STEMS), 2) / 2
    )
    generic = any(phrase in folded for phrase in GENERIC_PHRASES)
    fits = length_credit(len(text))
    components = {
        "length": W_LENGTH * fits,
        "portuguese": W_PORTUGUESE * portuguese * fits,
        "creativity": 0.0 if generic else W_CREATIVITY * min(len(set(words)), 6) / 6 * fits,
        "formal": -FORMAL_PENALTY if any(p in folded for p in FORMAL_PHRASES) else 0.0,
    }
    subtotal = clamp01(sum(components.values()))
    several = sum(1 for line in text.splitlines() if WORD_LINE.search(line)) > 1
    components["several"] = -(1 - SEVERAL_KEEPS) * subtotal if several else 0.0
    subtotal += components["several"]
    components["unsendable"] = -(1 - UNSENDABLE_KEEPS) * subtotal if unsendable(text) else 0.0
    return Score(clamp01(subtotal + components["unsendable"]), components)


def unsendable(text: str) -> bool:
    """Spanish, shouting, or hashtags instead of a message."""
    words = re.findall(r"[a-z]+", fold(text))
    spanish = sum(word in SPANISH for word in set(words)) + sum(m in text for m in SPANISH_MARKS)
    letters = [ch for ch in text if ch.isalpha()]
    shouting = len(letters) >= MIN_LETTERS_TO_SHOUT and (
        sum(ch.isupper() for ch in letters) / len(letters) >= SHOUTING_SHARE
    )
    tokens = text.split()
    hashtags = bool(tokens) and sum(token.startswith("#") for token in tokens) * 2 >= len(tokens)
    return spanish >= SPANISH_FOR_A_MESSAGE or shouting or hashtags
