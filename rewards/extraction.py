"""Review -> 10-field JSON. The seed's V4.2.1 rule, made strict where the seed was bitten.

JSON validity 0.30 (0.20 when only json-repair could read it), schema completeness 0.30
(fields present / 10), value validity 0.40 (typed checks / 10), and -0.20 when the sentiment
contradicts the review score. Beyond the seed: where the row carries gold values from the data
(the review score, whether delivery was late, the product category), their correctness is worth
0.30 and the seed's three parts share the other 0.70.

Typed checks are strict: an integer is never a bool (the seed's bare isinstance(v, int) let True
pass) and a boolean is a real JSON boolean, not the field's name echoed back as a string (what the
base model did).
"""

from __future__ import annotations

import json
import re
from typing import Any

import json_repair

from rewards.common import SCAN_LIMIT, Score, clamp01, completion_text, fold

SENTIMENTS = ("positivo", "neutro", "negativo")
CHURN_RISKS = ("baixo", "medio", "alto")

# The prompt's schema is written from this table, so the instructions and the reward cannot drift
# apart; VALUE_CHECKS below holds each field's typed check.
FIELDS: dict[str, str] = {
    "sentiment": '"positivo", "neutro" ou "negativo"',
    "sentiment_score": "inteiro de 1 a 5: a nota que o texto expressa",
    "delivery_issue": "true ou false: o cliente relata problema na entrega",
    "product_issue": "true ou false: produto com defeito, errado ou diferente do anunciado",
    "seller_issue": "true ou false: problema com o vendedor ou o atendimento",
    "delivered_late": "true ou false: entregue depois da data estimada (veja os dados do pedido)",
    "would_recommend": "true ou false: o cliente recomendaria a loja",
    "churn_risk": '"baixo", "medio" ou "alto": risco de o cliente não comprar de novo',
    "product_category": "a categoria do produto, como escrita nos dados do pedido",
    "summary": "uma frase curta em português resumindo a avaliação",
}

W_JSON, W_JSON_REPAIRED, W_SCHEMA, W_VALUES = 0.30, 0.20, 0.30, 0.40
SENTIMENT_CONTRADICTION_PENALTY = 0.20
W_GOLD = 0.30
COMPONENTS = ("json", "schema", "values", "contradiction", "gold")

# `"x": 4,5` is how a Portuguese speaker writes 4.5; only a comma between digits right after a
# colon is rewritten, so lists like [1,2] are left alone.
_PT_DECIMAL = re.compile(r"(:\s*-?\d+),(\d+)(?=\s*[,}\n\]])")
_FENCE = re.compile(r"```(?:json)?", re.IGNORECASE)


def normalize_pt_decimals(text: str) -> str:
    return _PT_DECIMAL.sub(r"\1.\2", text)


def parse_json_object(text: str) -> tuple[dict[str, Any] | None, bool]:
    """The first JSON object in the text, and whether it parsed without repair."""
    text = _FENCE.sub("", text[:SCAN_LIMIT])
    start = text.find("{")
    if start < 0:
        return None, False
    end = text.rfind("}")
    candidate = normalize_pt_decimals(text[start : end + 1] if end > start else text[start:])
    try:
        parsed = json.loads(candidate)
        if isinstance(parsed, dict):
            return parsed, True
    except (json.JSONDecodeError, RecursionError):
        pass
    try:
        repaired = json_repair.loads(candidate)
    except Exception:  # json-repair raises assorted errors on hostile input
        return None, False
    return (repaired, False) if isinstance(repaired, dict) and repaired else (None, False)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


VALUE_CHECKS = {
    "sentiment": lambda v: isinstance(v, str) and v.strip().lower() in SENTIMENTS,
    "sentiment_score": lambda v: _is_int(v) and 1 <= v <= 5,
    "delivery_issue": _is_bool,
    "product_issue": _is_bool,
    "seller_issue": _is_bool,
    "delivered_late": _is_bool,
    "would_recommend": _is_bool,
    "churn_risk": lambda v: isinstance(v, str) and v.strip().lower() in CHURN_RISKS,
    "product_category": _is_text,
    "summary": _is_text,
}


def contradicts(sentiment: Any, review_score: int | None) -> bool:
    """A positive sentiment on a 1-2 star review, or a negative one on 4-5 stars."""
    if review_score is None or not isinstance(sentiment, str):
        return False
    sentiment = sentiment.strip().lower()
    return (review_score >= 4 and sentiment == "negativo") or (
        review_score <= 2 and sentiment == "positivo"
    )


def _category_key(value: str) -> str:
    return re.sub(r"[\s\-]+", "_", fold(value).strip())


def gold_correctness(
    data: dict[str, Any],
    review_score: int | None,
    gold_delivered_late: bool | None,
    gold_category: str | None,
) -> float | None:
    """Share of the gold-checkable fields that are right; None when the row has no gold."""
    checks = []
    if review_score is not None:
        checks.append(
            _is_int(data.get("sentiment_score")) and data["sentiment_score"] == review_score
        )
    if gold_delivered_late is not None:
        checks.append(data.get("delivered_late") is bool(gold_delivered_late))
    if gold_category:
        category = data.get("product_category")
        checks.append(
            isinstance(category, str) and _category_key(category) == _category_key(gold_category)
        )
    return sum(checks) / len(checks) if checks else None


def score(
    completion: Any,
    review_score: int | None = None,
    gold_delivered_late: bool | None = None,
    gold_category: str | None = None,
) -> Score:
    data, strict = parse_json_object(completion_text(completion))
    if data is None:
        return Score(0.0, dict.fromkeys(COMPONENTS, 0.0))
    present = [name for name in FIELDS if name in data]
    valid = [name for name in present if VALUE_CHECKS[name](data[name])]
    correctness = gold_correctness(data, review_score, gold_delivered_late, gold_category)
    share = 1.0 if correctness is None else 1.0 - W_GOLD
    components = {
        "json": share * (W_JSON if strict else W_JSON_REPAIRED),
        "schema": share * W_SCHEMA * len(present) / len(FIELDS),
        "values": share * W_VALUES * len(valid) / len(FIELDS),
        "contradiction": -SENTIMENT_CONTRADICTION_PENALTY
        if contradicts(data.get("sentiment"), review_score)
        else 0.0,
    }
    if correctness is not None:
        components["gold"] = W_GOLD * correctness
    return Score(clamp01(sum(components.values())), components)


def schema_instructions() -> str:
    lines = [f'- "{name}": {description}' for name, description in FIELDS.items()]
    return "\n".join(lines)
