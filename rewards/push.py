"""Context -> push notification of at most 120 characters. The seed's V4.2.1 rule.

Length 0.50 up to 120 characters, decaying steeply to zero at 200 (the V4.2.1 hotfix: before it,
analytical essays about notifications still earned length credit). Portuguese markers 0.30,
creativity 0.20 (not a generic template), and -0.20 for formal-letter phrases.
"""

from __future__ import annotations

import re
from typing import Any

from rewards.common import Score, clamp01, completion_text, distinct_hits, fold

W_LENGTH, W_PORTUGUESE, W_CREATIVITY = 0.50, 0.30, 0.20
FORMAL_PENALTY = 0.20
COMPONENTS = ("length", "portuguese", "creativity", "formal")
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
    components = {
        "length": W_LENGTH * length_credit(len(text)),
        "portuguese": W_PORTUGUESE * portuguese,
        "creativity": 0.0 if generic else W_CREATIVITY * min(len(set(words)), 6) / 6,
        "formal": -FORMAL_PENALTY if any(p in folded for p in FORMAL_PHRASES) else 0.0,
    }
    return Score(clamp01(sum(components.values())), components)
