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
from dataclasses import dataclass
from typing import Any

import pandas as pd

from rewards.review_evidence import read_review, star_sentiment
from tasks.prep.rows import brl, decimal_pt

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


def sql_reference(gold_sql: str, computes: str, answer: list[list[Any]]) -> str:
    """The gold SQL, then what it computes and what its result says, in Portuguese."""
    # The value or the rows alone: what the query computes says what they are.
    result = "; ".join(", ".join(_value(cell) for cell in row) for row in answer)
    return f"```sql\n{gold_sql};\n```\nA consulta {computes}: {result}."


# How many groups tied at an extreme a reference names.
TIES_NAMED = 2


@dataclass(frozen=True)
class Extreme:
    """The groups at a column's extreme and the value: every group tied there where they are
    two, the first alone where more (ties are all first places, and the answer must end within
    the token budget)."""

    groups: list[str]
    value: float

    @property
    def names(self) -> str:
        """'A', 'A e B', 'A, B e C'."""
        head, last = self.groups[:-1], self.groups[-1]
        return f"{', '.join(head)} e {last}" if head else last

    @property
    def have(self) -> str:
        return f"{self.names} {'têm' if len(self.groups) > 1 else 'tem'}"


def _extreme(table: pd.DataFrame, column: str, highest: bool) -> Extreme | None:
    known = table[column].dropna()
    if known.empty:
        return None
    value = known.max() if highest else known.min()
    tied = [str(g) for g in known.index[known == value]]
    return Extreme(tied if len(tied) <= TIES_NAMED else tied[:1], float(value))


def insights_reference(table: pd.DataFrame, label: str, focus: str) -> str:
    """An analysis of one data summary for the focus the prompt asks (tasks/prep/insights.py
    FOCUSES): the groups at the extremes of what that focus is about, each with the summary's
    own number, and what to do about them. Every claim is true of the table (ties name every
    group tied), which tests/test_references.py holds with the insights reward's own reading."""
    largest = str(table.index[0])
    orders = f"{int(table.loc[largest, 'pedidos'])} pedidos"
    late_most, late_least = _extreme(table, "atraso", True), _extreme(table, "atraso", False)
    worst_rated, best_rated = _extreme(table, "nota", False), _extreme(table, "nota", True)
    freight, cheapest = _extreme(table, "frete", True), _extreme(table, "frete", False)
    ticket = _extreme(table, "ticket", True)

    def late(found: Extreme, which: str) -> str:
        return f"- {found.have} o {which} atraso: {decimal_pt(100 * found.value)}%."

    def rating(found: Extreme, which: str) -> str:
        return f"- {found.have} a {which} nota média: {decimal_pt(found.value)}."

    def money(found: Extreme, which: str, what: str) -> str:
        return f"- {found.have} o {which} {what}: {brl(found.value)}."

    volume = f"- {largest} concentra o maior volume: {orders}."
    lines: list[str] = []
    actions: list[str] = []
    if focus == "logistics":
        title = "Logística"
        if late_most and late_least and late_most.value > late_least.value:
            lines += [late(late_most, "maior"), late(late_least, "menor")]
            actions += [
                f"- Revisar a logística de {late_most.names} com as transportadoras.",
                f"- Levar a todos as práticas de entrega de {late_least.names}.",
            ]
        if late_most and late_most.value == 0:
            actions.append(f"- Manter os prazos: nenhum {label} teve atraso.")
        if freight and cheapest and freight.value > cheapest.value:
            lines.append(money(freight, "maior", "frete médio"))
            if not lines[:-1]:  # no delay to contrast: the freight's range says it
                lines.append(money(cheapest, "menor", "frete médio"))
            actions.append(f"- Negociar o frete de {freight.names}.")
    elif focus == "satisfaction":
        title = "Satisfação"
        if worst_rated and best_rated and best_rated.value > worst_rated.value:
            lines += [rating(worst_rated, "menor"), rating(best_rated, "maior")]
            actions += [
                f"- Acompanhar os clientes insatisfeitos de {worst_rated.names}.",
                f"- Levar a {worst_rated.names} o que funciona em {best_rated.names}.",
            ]
        actions.append(f"- Monitorar as avaliações por {label} todo mês.")
    elif focus == "marketing":
        title = "Marketing e sortimento"
        lines.append(volume)
        actions.append(f"- Investir em marketing em {largest}, onde a demanda já é maior.")
        if ticket:
            lines.append(money(ticket, "maior", "ticket médio"))
            actions.append(f"- Ampliar o sortimento de maior valor em {ticket.names}.")
    elif focus == "retention":
        title = "Retenção"
        lines.append(volume)
        if worst_rated:
            lines.append(rating(worst_rated, "menor"))
            actions.append(
                f"- Oferecer um cupom de recompra aos insatisfeitos de {worst_rated.names}."
            )
        if late_most and late_most.value > 0:
            lines.append(late(late_most, "maior"))
            actions.append(f"- Avisar os clientes de {late_most.names} antes de um atraso.")
        actions.append(f"- Criar uma campanha de recompra para os clientes de {largest}.")
    else:
        title = "Principais problemas"
        if late_most and late_most.value > 0:
            lines.append(late(late_most, "maior"))
            actions.append(f"- Revisar a logística de {late_most.names} com as transportadoras.")
        if worst_rated:
            lines.append(rating(worst_rated, "menor"))
            actions.append(f"- Acompanhar os clientes insatisfeitos de {worst_rated.names}.")
        lines.append(volume)
        actions.append(f"- Priorizar {largest}, onde um problema atinge mais clientes.")
    if not lines:
        lines.append(volume)
    return "\n".join([f"## {title} por {label}", *lines, "", "**Ações**", *actions])


# What to say for each push objective (tasks/prep/push.py: OBJECTIVES), short enough that the
# whole notification stays under the 120-character limit with the customer's city in it. Each
# promises only what the objective itself gives (a coupon, free shipping, an offer): no deadline,
# date, amount or refund that no prompt's data holds.
PUSH_MESSAGES = {
    "avisar que o pedido está a caminho": "seu pedido de {item} está a caminho! Acompanhe no app.",
    "tranquilizar sobre o prazo de entrega": (
        "seu pedido de {item} já está a caminho. Acompanhe a entrega pelo rastreio!"
    ),
    "recuperar o cliente insatisfeito com um cupom": (
        "sentimos muito! Separamos um cupom de desconto pra sua próxima compra."
    ),
    "pedir desculpas e oferecer ajuda": (
        "desculpe pelo transtorno! Fale com a gente: vamos ajudar você."
    ),
    "pedir uma avaliação da compra": "o que achou do seu pedido de {item}? Avalie sua compra!",
    "lembrar de avaliar o produto recebido": "seu {item} chegou? Conte pra gente o que achou!",
    "sugerir uma nova compra na mesma categoria": "tem novidade em {item} esperando por você!",
    "oferecer frete grátis na próxima compra": "sua próxima compra tem frete grátis. Aproveite!",
    "reengajar o cliente após o cancelamento": (
        "sentimos sua falta! Tem novidade em {item} pra você."
    ),
    "trazer o cliente de volta com uma oferta": (
        "volta pra gente? Separamos uma oferta em {item} pra você."
    ),
}


def push_reference(order: pd.Series, objective: str) -> str:
    item = (order["category"] or "produto").replace("_", " ")
    city = str(order["customer_city"]).title()
    return f"{city}, {PUSH_MESSAGES[objective].format(item=item)}"
