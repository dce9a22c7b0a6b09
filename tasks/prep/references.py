"""Reference answers, built from the same real data as each prompt: what SFT teaches.

They are written by rule, not by a model, from what the data says about the prompt's order,
question or summary, so each one is right where the data knows the answer (the stars, the
lateness, the category, the gold SQL and its result, the summary's numbers), and where it does not
(the issues, the recommendation, the churn risk) says what the extraction reward's own reading of
the review expects (rewards/review_evidence.py): SFT teaches the judgement the reward pays for.
`tests/test_references.py` scores them with the rewards: they must score high, or SFT would teach
the wrong thing.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pandas as pd

from rewards.review_evidence import read_review, star_sentiment
from tasks.prep.rows import decimal_pt

SUMMARY_CHARS = 100
# Where the review and its stars settle nothing (a 3-star review that neither recommends nor
# warns off): no recommendation.
UNSETTLED_RECOMMENDATION = False


def _summary(title: str, message: str) -> str:
    """The review's first sentence, cut at a word near SUMMARY_CHARS."""
    text = " ".join((f"{title}. {message}" if title else message).split())
    sentence = re.split(r"(?<=[.!?])\s", text, maxsplit=1)[0]
    if len(sentence) <= SUMMARY_CHARS:
        return sentence
    return sentence[:SUMMARY_CHARS].rsplit(" ", 1)[0] + "…"


def extraction_reference(order: pd.Series) -> str:
    """The 10-field JSON for a reviewed order: stars, lateness and category from the data, the
    judgement fields as the review's evidence has them."""
    stars = int(order["review_score"])
    title = (order["review_comment_title"] or "").strip()
    message = order["review_comment_message"].strip()
    late = bool(order["delivered_late"]) if pd.notna(order["delivered_late"]) else False
    reading = read_review(f"{title}\n{message}", stars, late)
    record = {
        "sentiment_score": stars,
        "sentiment": star_sentiment(stars),
        "delivery_issue": reading.expected("delivery_issue"),
        "product_issue": reading.expected("product_issue"),
        "seller_issue": reading.expected("seller_issue"),
        "delivered_late": late,
        "would_recommend": reading.expected("would_recommend", UNSETTLED_RECOMMENDATION),
        "churn_risk": reading.expected("churn_risk"),
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
