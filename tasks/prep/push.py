"""Push prompts: a customer's last order -> a notification of at most 120 characters."""

from __future__ import annotations

import random
from typing import Any

import pandas as pd

from rewards.push import OBJECTIVES as PUSH_OBJECTIVES
from tasks.prep.references import push_reference
from tasks.prep.rows import brl, prompt_row

SYSTEM = (
    "Você escreve notificações push para um marketplace brasileiro. Responda só com o texto da "
    "notificação: no máximo 120 caracteres, em português do Brasil, direto e pessoal, sem "
    "saudação formal."
)

STATUS_PT = {
    "delivered": "entregue",
    "shipped": "enviado",
    "invoiced": "faturado",
    "processing": "em separação",
    "approved": "aprovado",
    "created": "criado",
    "canceled": "cancelado",
    "unavailable": "indisponível",
}

# What a retailer's CRM wants from a customer in each situation: the push reward's objectives
# (rewards/push.py), in its order, so that a notification is held to the objective it was asked
# for.
OBJECTIVES: dict[str, tuple[str, ...]] = {
    situation: tuple(name for name, o in PUSH_OBJECTIVES.items() if o.situation == situation)
    for situation in dict.fromkeys(o.situation for o in PUSH_OBJECTIVES.values())
}


def situation(order: pd.Series) -> str:
    status = order["order_status"]
    if status in ("canceled", "unavailable"):
        return "lost"
    if status != "delivered":
        return "in_transit"
    if pd.isna(order["review_score"]):
        return "unreviewed"
    return "unhappy" if order["review_score"] <= 2 else "happy"


def over_situations(orders: pd.DataFrame, count: int) -> pd.DataFrame:
    """`count` of the orders (in their drawn order), taken a situation at a time in turn, so each
    objective's situation is as present as the data allows: most orders are delivered to a happy
    customer, and taken as drawn they left the other situations' objectives a handful of prompts."""
    kinds = orders.apply(situation, axis=1)
    queues = [list(orders.index[kinds == kind]) for kind in OBJECTIVES]
    picked: list[Any] = []
    while len(picked) < count and any(queues):
        for queue in queues:
            if queue and len(picked) < count:
                picked.append(queue.pop(0))
    return orders.loc[picked]


def push_prompt(order: pd.Series, rng: random.Random) -> dict[str, Any]:
    objective = rng.choice(OBJECTIVES[situation(order)])
    score = order["review_score"]
    user = (
        "Escreva uma notificação push (no máximo 120 caracteres) para este cliente.\n"
        f"Objetivo: {objective}\n"
        f"Cliente: {order['customer_city']}/{order['customer_state']}\n"
        f"Último pedido: {order['category'] or 'produto'} por {brl(order['items_value'])}, "
        f"em {order['order_purchase_timestamp']:%d/%m/%Y}\n"
        f"Status do pedido: {STATUS_PT.get(order['order_status'], order['order_status'])}\n"
        f"Nota dada pelo cliente: {'sem avaliação' if pd.isna(score) else f'{int(score)}/5'}"
    )
    return prompt_row(
        prompt_id=f"push-{order['order_id']}",
        task="push",
        system=SYSTEM,
        user=user,
        reference=push_reference(order, objective),
        order_id=order["order_id"],
        push_objective=objective,
    )
