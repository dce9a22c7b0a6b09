"""Reference answers, built from the same real data as each prompt: what SFT teaches.

They are written by rule, not by a model, from what the data says about the prompt's order,
question or summary, so each one is right where the data knows the answer (the stars, the
lateness, the category, the gold SQL and its result, the summary's numbers) and plausible where
it does not (issues the review text mentions, found by keyword). `tests/test_references.py`
scores them with the rewards: they must score high, or SFT would teach the wrong thing.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pandas as pd

from rewards.common import fold
from tasks.prep.rows import decimal_pt

# Stems of what a review says when the problem is the delivery, the product or the seller.
DELIVERY_STEMS = ("atras", "entreg", "chegou", "prazo", "demor", "correio", "transport")
PRODUCT_STEMS = ("defeit", "quebr", "errad", "diferent", "estrag", "falsific", "danific")
SELLER_STEMS = ("vendedor", "loja", "atendiment", "respost", "contato", "reclam")
SUMMARY_CHARS = 100


def _mentions(folded: str, stems: tuple[str, ...]) -> bool:
    return any(re.search(rf"\b{stem}", folded) for stem in stems)


def _summary(title: str, message: str) -> str:
    """The review's first sentence, cut at a word near SUMMARY_CHARS."""
    text = " ".join((f"{title}. {message}" if title else message).split())
    sentence = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
    if len(sentence) <= SUMMARY_CHARS:
        return sentence
    return sentence[:SUMMARY_CHARS].rsplit(" ", 1)[0] + "…"


def star_sentiment(stars: int) -> str:
    """The sentiment a review's own stars call for: 1-2 negativo, 3 neutro, 4-5 positivo. The
    reference answers say it; the production monitor holds answers to it (tasks/production/
    checks.py)."""
    return "positivo" if stars >= 4 else "neutro" if stars == 3 else "negativo"


def extraction_reference(order: pd.Series) -> str:
    """The 10-field JSON for a reviewed order: stars, lateness and category from the data, the
    issues from what the text mentions."""
    stars = int(order["review_score"])
    title = (order["review_comment_title"] or "").strip()
    message = order["review_comment_message"].strip()
    folded = fold(f"{title} {message}")
    late = bool(order["delivered_late"]) if pd.notna(order["delivered_late"]) else False
    record = {
        "sentiment": star_sentiment(stars),
        "sentiment_score": stars,
        "delivery_issue": late or (stars <= 3 and _mentions(folded, DELIVERY_STEMS)),
        "product_issue": stars <= 3 and _mentions(folded, PRODUCT_STEMS),
        "seller_issue": stars <= 3 and _mentions(folded, SELLER_STEMS),
        "delivered_late": late,
        "would_recommend": stars >= 4,
        "churn_risk": "baixo" if stars >= 4 else "medio" if stars == 3 else "alto",
        "product_category": order["category"] or "não informada",
        "summary": _summary(title, message),
    }
    return json.dumps(record, ensure_ascii=False)


def _value(cell: Any) -> str:
    if isinstance(cell, float):
        return decimal_pt(cell, 2)
    return str(cell)


def sql_reference(gold_sql: str, answer: list[list[Any]]) -> str:
    """The gold SQL, then what its result says, in Portuguese."""
    if len(answer) == 1 and len(answer[0]) == 1:
        result = f"o resultado é {_value(answer[0][0])}"
    else:
        rows = "; ".join(", ".join(_value(cell) for cell in row) for row in answer)
        result = f"o resultado traz {len(answer)} linhas: {rows}"
    return (
        f"```sql\n{gold_sql};\n```\n"
        f"A consulta cruza os pedidos, clientes e produtos da base e {result}."
    )


def insights_reference(table: pd.DataFrame, label: str) -> str:
    """An analysis of one data summary: the largest group, the worst delivery and the worst
    rating, each cited with the summary's own numbers, and what to do about them."""
    largest = table.index[0]
    lines = [
        f"## Análise por {label}",
        f"- {largest} concentra o maior volume: {int(table.loc[largest, 'pedidos'])} pedidos.",
    ]
    actions = ["- Recomendo priorizar o estoque e o marketing onde o volume já é alto."]
    late = table["atraso"].dropna()
    if len(late):
        worst = late.idxmax()
        lines.append(f"- {worst} tem o maior atraso: {decimal_pt(100 * late[worst])}%.")
        actions.append(
            f"- Revisar a logística de {worst} e negociar prazos com as transportadoras."
        )
    rated = table["nota"].dropna()
    if len(rated):
        worst = rated.idxmin()
        lines.append(f"- {worst} tem a menor nota média: {decimal_pt(rated[worst])}.")
        actions.append(
            f"- Monitorar as avaliações de {worst} e acompanhar cada cliente insatisfeito."
        )
    return "\n".join([*lines, "", "**Ações**", *actions])


# What to say for each push objective (tasks/prep/push.py: OBJECTIVES), short enough that the
# whole notification stays under the 120-character limit with the customer's city in it.
PUSH_MESSAGES = {
    "avisar que o pedido está a caminho": "seu pedido de {item} está a caminho!",
    "tranquilizar sobre o prazo de entrega": "seu pedido de {item} segue no prazo. Já já chega!",
    "recuperar o cliente insatisfeito com um cupom": "sentimos muito! Use o cupom VOLTA10 já.",
    "pedir desculpas e oferecer ajuda": "desculpe pelo transtorno. Fale com a gente e resolvemos!",
    "pedir uma avaliação da compra": "o que achou do seu pedido de {item}? Avalie em 1 minuto!",
    "lembrar de avaliar o produto recebido": "seu {item} chegou? Conte pra gente o que achou!",
    "sugerir uma nova compra na mesma categoria": "tem novidade em {item} esperando por você!",
    "oferecer frete grátis na próxima compra": "frete grátis na sua próxima compra. Só hoje!",
    "reengajar o cliente após o cancelamento": "sentimos sua falta! Veja as ofertas de {item}.",
    "trazer o cliente de volta com uma oferta": "volta pra gente? 10% de desconto em {item}.",
}


def push_reference(order: pd.Series, objective: str) -> str:
    item = (order["category"] or "produto").replace("_", " ")
    city = str(order["customer_city"]).title()
    return f"{city}, {PUSH_MESSAGES[objective].format(item=item)}"
