"""Extraction prompts: a real review plus its order's metadata -> the 10-field JSON."""

from __future__ import annotations

from typing import Any

import pandas as pd

from rewards.extraction import schema_instructions
from tasks.prep.references import extraction_reference
from tasks.prep.rows import brl, prompt_row

SYSTEM = (
    "Você é um analista de e-commerce brasileiro. Leia a avaliação do cliente e os dados do "
    "pedido e responda apenas com um objeto JSON com exatamente estes 10 campos:\n"
    f"{schema_instructions()}"
)


# Shorter comments ("ok", "Xxxdf") carry nothing to extract.
MIN_REVIEW_CHARS = 15


def has_review_text(order: pd.Series) -> bool:
    message = order.get("review_comment_message")
    return isinstance(message, str) and len(message.strip()) >= MIN_REVIEW_CHARS


def _date(value: Any) -> str:
    return value.strftime("%d/%m/%Y") if pd.notna(value) else "não entregue"


def extraction_prompt(order: pd.Series) -> dict[str, Any]:
    title = (order["review_comment_title"] or "").strip()
    message = order["review_comment_message"].strip()
    category = order["category"] or None
    user = (
        f"Avaliação (nota {int(order['review_score'])}/5)\n"
        f"Título: {title or '(sem título)'}\n"
        f"Mensagem: {message}\n\n"
        "Dados do pedido:\n"
        f"- Categoria: {category or 'não informada'}\n"
        f"- Data da compra: {_date(order['order_purchase_timestamp'])}\n"
        f"- Entrega estimada: {_date(order['order_estimated_delivery_date'])}\n"
        f"- Entregue em: {_date(order['order_delivered_customer_date'])}\n"
        f"- Valor dos itens: {brl(order['items_value'])}"
    )
    late = order["delivered_late"]
    return prompt_row(
        prompt_id=f"extraction-{order['review_id']}",
        task="extraction",
        system=SYSTEM,
        user=user,
        reference=extraction_reference(order),
        order_id=order["order_id"],
        review_id=order["review_id"],
        review_text=f"{title}\n{message}".strip(),
        review_score=int(order["review_score"]),
        gold_delivered_late=None if pd.isna(late) else bool(late),
        gold_category=category,
    )
