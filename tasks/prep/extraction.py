"""Extraction prompts: a real review plus its order's metadata -> the 10-field JSON."""

from __future__ import annotations

from typing import Any

import pandas as pd

from rewards.extraction import FIELDS, schema_instructions
from tasks.prep.references import extraction_reference
from tasks.prep.rows import brl, prompt_row

# The system message, by the recipe's data.extraction_instructions: each field described (what a
# model that never saw an answer needs: 314 tokens of SmolLM2's 480 in a prompt), or the fields
# named in their order (72 tokens), for a model SFT has shown the answers to.
SYSTEM = {
    "described": (
        "Você é um analista de e-commerce brasileiro. Leia a avaliação do cliente e os dados do "
        "pedido e responda apenas com um objeto JSON com exatamente estes 10 campos:\n"
        f"{schema_instructions()}"
    ),
    "named": (
        "Leia a avaliação e responda só com um objeto JSON com os campos "
        + ", ".join(f'"{name}"' for name in list(FIELDS)[:-1])
        + f' e "{list(FIELDS)[-1]}".'
    ),
}


# Shorter comments ("ok", "Xxxdf") carry nothing to extract.
MIN_REVIEW_CHARS = 15


def has_review_text(order: pd.Series) -> bool:
    message = order.get("review_comment_message")
    return isinstance(message, str) and len(message.strip()) >= MIN_REVIEW_CHARS


def _date(value: Any) -> str:
    return value.strftime("%d/%m/%Y") if pd.notna(value) else "não entregue"


# The order's details in the prompt, in this order.
ORDER_LABELS = ("Categoria", "Data da compra", "Entrega estimada", "Entregue em", "Valor dos itens")
# What the prompt says of details a production folder without the order's tables cannot give:
# neither "não entregue" nor "não informada", which would state a fact about the order.
NOT_AVAILABLE = "não disponível"


def extraction_prompt(
    order: pd.Series, order_known: bool = True, instructions: str = "described"
) -> dict[str, Any]:
    """The prompt for a reviewed order; with `order_known` False, for the review alone (its
    order's details unavailable, so no delivery or category gold either). `instructions`: which
    SYSTEM message."""
    title = (order["review_comment_title"] or "").strip()
    message = order["review_comment_message"].strip()
    if order_known:
        category = order["category"] or None
        late = None if pd.isna(order["delivered_late"]) else bool(order["delivered_late"])
        values = (
            category or "não informada",
            _date(order["order_purchase_timestamp"]),
            _date(order["order_estimated_delivery_date"]),
            _date(order["order_delivered_customer_date"]),
            brl(order["items_value"]),
        )
    else:
        category, late, values = None, None, (NOT_AVAILABLE,) * len(ORDER_LABELS)
    details = "\n".join(
        f"- {label}: {value}" for label, value in zip(ORDER_LABELS, values, strict=True)
    )
    user = (
        f"Avaliação (nota {int(order['review_score'])}/5)\n"
        f"Título: {title or '(sem título)'}\n"
        f"Mensagem: {message}\n\n"
        f"Dados do pedido:\n{details}"
    )
    return prompt_row(
        prompt_id=f"extraction-{order['review_id']}",
        task="extraction",
        system=SYSTEM[instructions],
        user=user,
        reference=extraction_reference(order),
        order_id=order["order_id"],
        review_id=order["review_id"],
        review_text=f"{title}\n{message}".strip(),
        review_score=int(order["review_score"]),
        gold_delivered_late=late,
        gold_category=category,
    )
