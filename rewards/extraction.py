"""Review -> 10-field JSON, judged on what it says about the review, not only on its shape.

A constant answer ("positivo", no issue, low churn risk) is valid JSON with every field typed
right, and V4.2's rule paid it 0.80 on a one-star "não recebi meu produto". Here the form is
worth W_FORMAT (V4.2's parts inside it: JSON validity 0.30, or 0.20 when only json-repair could
read it; schema completeness 0.30; typed values 0.40), and the judgement the rest:

- sentiment against the stars, W_SENTIMENT (at least the whole form's weight): 1-2 stars
  negativo, 3 neutro, 4-5 positivo; half for a neighbour the review's text leans to, a fifth for
  another neighbour (nothing on one or five stars), nothing for the opposite, which also keeps
  only OPPOSITE_KEEPS of the total, as does a sentiment that contradicts the answer's own
  sentiment_score (a 1 with "neutro"): GRPO on SmolLM2 found "neutro" to every review, with the
  score copied right, a hedge the reward paid for;
- the issue, recommendation and churn fields against the evidence of the review (the customer's
  words, read with Portuguese negation; the stars; the order's dates), W_EVIDENCE
  (rewards/review_evidence.py); each problem the customer wrote down and the answer denies keeps
  only MISSED_KEEPS of the total, and each one the review rules out (the order on time, "sem
  defeito") and the answer reports only INVENTED_KEEPS;
- the fields the order's data fixes (the stars as sentiment_score, lateness, category), W_GOLD.

The judgement parts are earned in proportion to the fields present: an object cut after four
fields has judged four fields, not ten. Without the stars (a log line with no context) only the
form can be judged, and it is the whole score.

Typed checks are strict: an integer is never a bool (V4.2's bare isinstance(v, int) let True
pass) and a boolean is a real JSON boolean, not the field's name echoed back as a string (what the
base model did).
"""

from __future__ import annotations

import json
import re
from typing import Any

import json_repair

from rewards.common import SCAN_LIMIT, Score, clamp01, completion_text, fold
from rewards.review_evidence import IMPLIED, Reading, contradicts_itself, opposite, read_review

SENTIMENTS = ("positivo", "neutro", "negativo")
CHURN_RISKS = ("baixo", "medio", "alto")

# The prompt's schema is written from this table, so the instructions and the reward cannot drift
# apart; VALUE_CHECKS below holds each field's typed check. The score comes before the sentiment
# because a model writes the fields in this order: the number it copies from the stars is then
# written before the word that follows from it; asked the other way round, a small model agrees
# with the stars less (CHANGELOG.md, "The runs behind the reward rules").
FIELDS: dict[str, str] = {
    "sentiment_score": "inteiro de 1 a 5: a nota que o texto expressa",
    "sentiment": '"positivo", "neutro" ou "negativo"',
    "delivery_issue": "true ou false: o cliente relata problema na entrega",
    "product_issue": "true ou false: produto com defeito, errado ou diferente do anunciado",
    "seller_issue": "true ou false: problema com o vendedor ou o atendimento",
    "delivered_late": "true ou false: entregue depois da data estimada (veja os dados do pedido)",
    "would_recommend": "true ou false: o cliente recomendaria a loja",
    "churn_risk": '"baixo", "medio" ou "alto": risco de o cliente não comprar de novo',
    "product_category": "a categoria do produto, como escrita nos dados do pedido",
    "summary": "uma frase curta em português resumindo a avaliação",
}

# Inside the form: V4.2's parts; words around the object cost a little of the JSON part.
W_JSON, W_JSON_REPAIRED, W_SCHEMA, W_VALUES = 0.30, 0.20, 0.30, 0.40
CHAT_COST = 0.10
# A summary that could belong to any review weighs as much as what the stars imply.
SUMMARY_WEIGHT = IMPLIED
# The judgement outweighs the form: the sentiment alone weighs as much as all of the form.
W_FORMAT, W_SENTIMENT, W_EVIDENCE, W_GOLD = 0.25, 0.30, 0.30, 0.15
# The opposite of what the customer said is worse than no answer a retailer can act on: it hides
# the complaint. So is a sentiment the answer's own score rules out. The total keeps this share.
OPPOSITE_KEEPS = 0.35
# A problem the customer wrote down ("não recebi", "veio quebrado") and the answer denies is the
# review's point missed: the total keeps this share for each one.
MISSED_KEEPS = 0.6
# A problem the review rules out (an order on time, "chegou antes do prazo") and the answer
# reports is a false alarm, and costs what a miss does: so a flag pays only where the review more
# likely states the problem than rules it out. Cheaper, it is the way round the miss: a flag raised
# on every review (CHANGELOG.md, "The runs behind the reward rules").
INVENTED_KEEPS = MISSED_KEEPS
COMPONENTS = (
    "json", "schema", "values", "sentiment", "evidence", "gold", "opposite", "missed", "invented",
)  # fmt: skip
# A cut answer never ended: its object may parse (a first copy before a loop, or what json-repair
# completes), but production pays the whole token budget for it and the reader may get half an
# object. Half its score.
CUT_KEEPS = 0.5

# `"x": 4,5` is how a Portuguese speaker writes 4.5; only a comma between digits right after a
# colon is rewritten, so lists like [1,2] are left alone.
_PT_DECIMAL = re.compile(r"(:\s*-?\d+),(\d+)(?=\s*[,}\n\]])")
_FENCE = re.compile(r"```(?:json)?", re.IGNORECASE)


def normalize_pt_decimals(text: str) -> str:
    return _PT_DECIMAL.sub(r"\1.\2", text)


def _first_object(text: str) -> tuple[dict[str, Any] | None, bool, str]:
    """The first JSON object in the text (a strict parse of the first complete one, else of all
    from the first brace to the last, else json-repair's reading), whether it parsed without
    repair, and the text around it (fences dropped)."""
    text = normalize_pt_decimals(_FENCE.sub("", text[:SCAN_LIMIT]))
    start = text.find("{")
    if start < 0:
        return None, False, text
    try:
        parsed, end = json.JSONDecoder().raw_decode(text, start)
        if isinstance(parsed, dict):
            return parsed, True, text[:start] + text[end:]
    except (json.JSONDecodeError, RecursionError):
        pass
    end = text.rfind("}")
    candidate = text[start : end + 1] if end > start else text[start:]
    around = text[:start] + (text[end + 1 :] if end > start else "")
    try:
        repaired = json_repair.loads(candidate)
    except Exception:  # json-repair raises assorted errors on hostile input
        return None, False, text
    return (
        (repaired, False, around)
        if isinstance(repaired, dict) and repaired
        else (None, False, text)
    )


def parse_json_object(text: str) -> tuple[dict[str, Any] | None, bool]:
    """The first JSON object in the text, and whether it parsed without repair."""
    data, strict, _ = _first_object(text)
    return data, strict


def stated_sentiment(text: str) -> str | None:
    """The sentiment the answer's JSON object states, in lower case; None where it states none."""
    data, _ = parse_json_object(text)
    said = data.get("sentiment") if data else None
    return said.strip().lower() if isinstance(said, str) else None


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


def evidence_credit(data: dict[str, Any], reading: Reading) -> float:
    """Weighted share of the judgement fields that agree with the review's evidence, the summary
    (whether it says something of this review) among them."""
    parts = [
        (expected.weight, expected.credit(data.get(name)))
        for name, expected in reading.fields.items()
    ]
    summary = reading.summary_credit(data.get("summary"))
    if summary is not None:
        parts.append((SUMMARY_WEIGHT, summary))
    return sum(weight * credit for weight, credit in parts) / sum(weight for weight, _ in parts)


def score(
    completion: Any,
    review_score: int | None = None,
    review_text: str | None = None,
    gold_delivered_late: bool | None = None,
    gold_category: str | None = None,
) -> Score:
    data, strict, around = _first_object(completion_text(completion))
    if data is None:
        return Score(0.0, dict.fromkeys(COMPONENTS, 0.0))
    present = [name for name in FIELDS if name in data]
    valid = [name for name in present if VALUE_CHECKS[name](data[name])]
    # The prompt asks for the object alone: chat around it is one more thing to strip.
    chatty = bool(re.search(r"[^\W\d_]{2,}", around))
    form = {
        "json": (W_JSON if strict else W_JSON_REPAIRED) - CHAT_COST * chatty,
        "schema": W_SCHEMA * len(present) / len(FIELDS),
        "values": W_VALUES * len(valid) / len(FIELDS),
    }
    if review_score is None:  # nothing to judge the judgement by
        return Score(clamp01(sum(form.values())), form)
    reading = read_review(review_text, review_score, gold_delivered_late)
    judged = len(present) / len(FIELDS)
    components = {name: W_FORMAT * value for name, value in form.items()}
    components["sentiment"] = (
        W_SENTIMENT * judged * reading.sentiment_credit(data.get("sentiment"), review_score)
    )
    components["evidence"] = W_EVIDENCE * judged * evidence_credit(data, reading)
    gold = gold_correctness(data, review_score, gold_delivered_late, gold_category)
    components["gold"] = W_GOLD * judged * (gold or 0.0)
    subtotal = sum(components.values())
    sentiment = data.get("sentiment")
    wrong_way = opposite(sentiment, review_score) or contradicts_itself(
        sentiment, data.get("sentiment_score")
    )
    keeps = OPPOSITE_KEEPS if wrong_way else 1.0
    components["opposite"] = -(1 - keeps) * subtotal
    keeps_missed = MISSED_KEEPS ** len(reading.missed(data))
    components["missed"] = -(1 - keeps_missed) * subtotal * keeps
    invented = len(reading.invented(data))
    components["invented"] = -(1 - INVENTED_KEEPS**invented) * subtotal * keeps * keeps_missed
    return Score(clamp01(sum(components.values())), components)


def schema_instructions() -> str:
    lines = [f'- "{name}": {description}' for name, description in FIELDS.items()]
    return "\n".join(lines)
