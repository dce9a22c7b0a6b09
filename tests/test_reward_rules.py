"""Every reward rule matters. For each rule, an answer of its own that the rule alone scores down,
and the audit probe that guards it; patched out, both the answer's check and the probe must fail.
A rule that no test can tell from the identity is a rule nobody would notice losing (the loop
tests once passed with `first_instance` replaced by the identity)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

import rewards
from rewards import TASKS, common, extraction, insights, push, review_evidence, score, sql_qa
from rewards.sql_sandbox import execute
from tasks.evaluation.audit import PROBES, run_probes

# A two-star complaint of the product and the seller, of an order that came on time.
REVIEW = {
    "review_score": 2,
    "review_text": "O relógio veio com a pulseira quebrada e a loja não respondeu meus e-mails.",
    "gold_delivered_late": False,
    "gold_category": "relogios_presentes",
}
READING = {
    "sentiment_score": 2,
    "sentiment": "negativo",
    "delivery_issue": False,
    "product_issue": True,
    "seller_issue": True,
    "delivered_late": False,
    "would_recommend": False,
    "churn_risk": "alto",
    "product_category": "relogios_presentes",
    "summary": "Relógio com a pulseira quebrada e a loja sem resposta.",
}
PRAISE = {
    "review_score": 5,
    "review_text": "Relógio lindo, sem nenhum defeito e chegou no prazo.",
    "gold_delivered_late": False,
    "gold_category": "relogios_presentes",
}
# Praise that names no problem, and says nothing of the seller.
HAPPY = {**PRAISE, "review_text": "Relógio lindo, adorei! Recomendo."}
PRAISED = {
    **READING,
    "sentiment_score": 5,
    "sentiment": "positivo",
    "product_issue": False,
    "seller_issue": False,
    "would_recommend": True,
    "churn_risk": "baixo",
    "summary": "Relógio lindo, sem defeito e no prazo.",
}


def reading(**fields: Any) -> str:
    return json.dumps({**READING, **fields}, ensure_ascii=False)


def judged(answer: str, context: dict[str, Any] = REVIEW) -> float:
    return score("extraction", answer, **context).total


# SQL: the average price of a category, a question no probe asks.
CATEGORY = "beleza_saude"
QUESTION = f"Qual é o preço médio dos itens vendidos na categoria {CATEGORY}?"
GOLD = (
    "SELECT ROUND(AVG(i.price), 2) FROM order_items i JOIN products p "
    f"ON p.product_id = i.product_id WHERE p.product_category_name = '{CATEGORY}'"
)
QUERY = f"```sql\n{GOLD};\n```"
WITH_FREIGHT = QUERY.replace("AVG(i.price)", "AVG(i.price + i.freight_value)")
SAME_AVERAGE = QUERY.replace("ROUND(AVG(i.price), 2)", "ROUND(SUM(i.price) / COUNT(*), 2)")


def brl(value: float) -> str:
    return "R$ " + f"{value:,.2f}".replace(",", "_").replace(".", ",").replace("_", ".")


def explained(value: str | None) -> str:
    stated = f" O preço médio é de {value} por item." if value else ""
    return f"{QUERY}\nA consulta calcula o preço médio dos itens de beleza e saúde.{stated}"


def answered(database: str, answer: str) -> float:
    return score("sql_qa", answer, database=database, gold_sql=GOLD, question=QUESTION).total


def average_price(database: str) -> float:
    [(value,)] = execute(database, GOLD).rows or [(0.0,)]
    return value


def sent(answer: str, objective: str) -> float:
    return score("push", answer, push_objective=objective).total


# Too short for the length credit: its copies would earn it.
LINE = "- Revisar prazos no RJ."
ANALYSIS = (
    "## Diagnóstico\n- SP tem 1.210 pedidos e atraso de 4,1%.\n\n## Recomendações\n"
    "1. Priorizar a logística no RJ.\n2. Monitorar o atraso por estado."
)
UNGROUNDED = ANALYSIS.replace("1.210 pedidos e atraso de 4,1%", "muitos pedidos e pouco atraso")
# An extraction-like object for a summary, its numbers copied from it.
COPIED = json.dumps({"estado": "SP", "pedidos": 1210, "atraso": "4,1%", "resumo": "SP lidera."})
SUMMARY = "| estado | pedidos | atraso |\n|---|---|---|\n| SP | 1210 | 4,1% |\n| RJ | 410 | 14,8% |"
FREE_SHIPPING = "oferecer frete grátis na próxima compra"
WIN_BACK = "trazer o cliente de volta com uma oferta"
SENDABLE = "Brasília, sua próxima compra de utilidades domésticas tem frete grátis! 🏠"


@dataclass(frozen=True)
class Rule:
    name: str
    # What removes the rule: (object, attribute, value) set for the test.
    removed: tuple[tuple[Any, str, Any], ...]
    # An answer of the rule's own, scored down by it: True while the rule holds.
    scores_down: Callable[[str], bool]
    probe: str


RULES = [
    Rule(
        "cut",
        ((rewards, "CUT_KEEPS", dict.fromkeys(TASKS, 1.0)),),
        lambda _: (
            score("insights", ANALYSIS, truncated=True).total < score("insights", ANALYSIS).total
        ),
        "cut_answer_scores_below_the_same_answer_ended",
    ),
    Rule(
        "repetition",
        ((rewards, "REPETITION_PENALTY", 0.0),),
        lambda _: judged(f"{reading()}\n{reading()}") < judged(reading()) - 0.05,
        "a_loop_costs_even_when_it_ended",
    ),
    Rule(
        "first instance",
        ((rewards, "first_instance", lambda text: text[: common.SCAN_LIMIT]),),
        lambda _: score("insights", "\n".join([LINE] * 3)).total < score("insights", LINE).total,
        "copies_earn_nothing",
    ),
    Rule(
        "opposite sentiment",
        ((extraction, "OPPOSITE_KEEPS", 1.0),),
        lambda _: judged(reading(sentiment="positivo")) < 0.5 * judged(reading()),
        "opposite_sentiment_costs",
    ),
    Rule(
        "hedge",
        (
            (extraction, "contradicts_itself", lambda *_: False),
            (review_evidence, "EXTREME_STARS", ()),
        ),
        lambda _: (
            judged(reading(sentiment="neutro", sentiment_score=3), {**REVIEW, "review_score": 1})
            < 0.7 * judged(reading(sentiment_score=1), {**REVIEW, "review_score": 1})
        ),
        "hedged_judgement_scores_below_a_reading",
    ),
    Rule(
        "denied complaint",
        ((extraction, "MISSED_KEEPS", 1.0),),
        lambda _: judged(reading(product_issue=False)) < 0.7 * judged(reading()),
        "missed_complaint_costs",
    ),
    Rule(
        "false alarm",
        ((extraction, "INVENTED_KEEPS", 1.0),),
        lambda _: judged(reading(delivery_issue=True)) < 0.7 * judged(reading()),
        "invented_complaint_costs",
    ),
    Rule(
        "praise rules out a complaint",
        ((review_evidence, "RULED_OUT_BY_PRAISE", ()),),
        lambda _: (
            judged(json.dumps({**PRAISED, "seller_issue": True}), HAPPY)
            < 0.7 * judged(json.dumps(PRAISED), HAPPY)
        ),
        "praise_rules_out_a_seller_flag",
    ),
    Rule(
        "recommendation ruled out",
        ((review_evidence.Reading, "recommends_against_the_review", lambda *_: False),),
        lambda _: judged(reading(would_recommend=True)) < 0.7 * judged(reading()),
        "recommending_a_complaint_costs",
    ),
    Rule(
        "negation",
        ((common, "NEGATORS", ()),),
        lambda _: (
            judged(json.dumps(PRAISED), PRAISE)
            > judged(json.dumps({**PRAISED, "product_issue": True}), PRAISE)
        ),
        "negation_is_read",
    ),
    Rule(
        "wrong result",
        ((sql_qa, "WRONG_RESULT_KEEPS", 1.0),),
        lambda db: (
            answered(db, explained(None).replace(CATEGORY, "perfumaria", 1))
            <= 0.5 * answered(db, explained(None))
        ),
        "sql_must_answer_the_question",
    ),
    Rule(
        "invented SQL number",
        ((sql_qa, "WRONG_NUMBER_KEEPS", 1.0),),
        lambda db: (
            answered(db, explained(brl(average_price(db) + 17.3)))
            < answered(db, explained(None))
            < answered(db, explained(brl(average_price(db))))
        ),
        "invented_sql_number_costs",
    ),
    Rule(
        "second query",
        ((sql_qa, "SECOND_QUERY_KEEPS", 1.0), (sql_qa, "DISAGREEING_KEEPS", 1.0)),
        lambda db: (
            answered(db, f"{explained(None)}\nOu ainda:\n{WITH_FREIGHT}")
            < 0.6 * answered(db, explained(None))
            and answered(db, f"{explained(None)}\nOu ainda:\n{SAME_AVERAGE}")
            < 0.8 * answered(db, explained(None))
        ),
        "second_query_costs",
    ),
    Rule(
        "ungrounded analysis numbers",
        ((insights, "UNGROUNDED_PENALTY", 0.0),),
        lambda _: (
            score("insights", ANALYSIS.replace("4,1%", "9,7%"), data_summary=SUMMARY).total
            < score("insights", ANALYSIS, data_summary=SUMMARY).total - 0.2
        ),
        "invented_insight_numbers_cost",
    ),
    Rule(
        "generic analysis",
        ((insights, "GENERIC_KEEPS", 1.0),),
        lambda _: (
            score("insights", UNGROUNDED, data_summary=SUMMARY).total
            < 0.7 * score("insights", ANALYSIS, data_summary=SUMMARY).total
        ),
        "an_analysis_cites_its_data",
    ),
    Rule(
        "another task's form",
        ((insights, "another_task", lambda _: False),),
        lambda _: score("insights", f"```json\n{COPIED}\n```", data_summary=SUMMARY).total == 0.0,
        "an_object_is_no_analysis",
    ),
    Rule(
        "several notifications",
        ((push, "SEVERAL_KEEPS", 1.0),),
        lambda _: (
            sent(f"{SENDABLE}\nOu: frete grátis pra você, Brasília!", FREE_SHIPPING)
            < 0.6 * sent(SENDABLE, FREE_SHIPPING)
        ),
        "push_is_one_sendable_message",
    ),
    Rule(
        "unsendable notification",
        ((push, "UNSENDABLE_KEEPS", 1.0),),
        lambda _: sent(SENDABLE.upper(), FREE_SHIPPING) < 0.6 * sent(SENDABLE, FREE_SHIPPING),
        "push_is_one_sendable_message",
    ),
    Rule(
        "push objective",
        ((push, "OFF_OBJECTIVE_KEEPS", 1.0),),
        lambda _: (
            sent("Brasília, tem novidade em utilidades domésticas pra você! 🏠", FREE_SHIPPING)
            < 0.6 * sent(SENDABLE, FREE_SHIPPING)
        ),
        "push_is_held_to_its_objective",
    ),
    Rule(
        "push situation",
        ((push, "RULED_OUT_KEEPS", 1.0),),
        lambda _: (
            sent("Seu pedido de bebês chegou! Volte e ganhe 10% com o cupom VOLTA10", WIN_BACK)
            < 0.6 * sent("Volte pra gente: 10% em bebês com o cupom VOLTA10 👶", WIN_BACK)
        ),
        "push_respects_the_situation",
    ),
]


@pytest.fixture(scope="module")
def database(prepared) -> str:
    store, manifest = prepared
    return str(store.path(manifest.database))


def probe_passes(rule: Rule, database: str) -> bool:
    """The rule's probe, as the audit gate runs it."""
    return run_probes(database, only=rule.probe)[f"probe:{rule.probe}"]["passed"]


def _by_name(rule: Rule) -> str:
    return rule.name


def test_every_rule_has_a_probe() -> None:
    assert {rule.probe for rule in RULES} <= set(PROBES)


@pytest.mark.parametrize("rule", RULES, ids=_by_name)
def test_the_rule_scores_its_answer_down(rule: Rule, database: str) -> None:
    assert rule.scores_down(database)
    assert probe_passes(rule, database)


@pytest.mark.parametrize("rule", RULES, ids=_by_name)
def test_without_the_rule_its_answer_and_its_probe_fail(
    rule: Rule, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for target, attribute, value in rule.removed:
        monkeypatch.setattr(target, attribute, value)
    assert not rule.scores_down(database)
    assert not probe_passes(rule, database)
