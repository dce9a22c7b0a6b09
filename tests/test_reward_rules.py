"""Every reward rule matters. For each rule, an answer of its own that the rule alone scores down
(other inputs than its probe's), and the audit probe that guards it; with the rule removed, both
the answer's check and the probe must fail, and the probe must fail by answering False, not by
raising (a probe that raises is broken, and a broken probe catches nothing). A rule that no test
can tell from the identity is a rule nobody would notice losing (the loop tests once passed with
`first_instance` replaced by the identity)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

import rewards
from rewards import (
    TASKS,
    common,
    extraction,
    insights,
    push,
    review_evidence,
    score,
    sql_qa,
    table_claims,
)
from rewards.common import fold
from rewards.sql_sandbox import Execution, execute
from tasks.evaluation.probes import PROBES, run_probe

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


def read_better(text: str, stars: int, right: dict[str, Any], wrong: dict[str, Any]) -> bool:
    """On a review of its own (a kitchen item, delivered on time), the reading with `right`
    scores well above the same reading with `wrong`."""
    context = {**REVIEW, "review_score": stars, "review_text": text, "gold_category": "cozinha"}
    base = {
        **READING,
        "sentiment_score": stars,
        "sentiment": "negativo" if stars <= 2 else "positivo",
        "product_issue": False,
        "seller_issue": False,
        "would_recommend": stars >= 4,
        "churn_risk": "alto" if stars <= 2 else "baixo",
        "product_category": "cozinha",
        "summary": text.split(".")[0] + ".",
    }
    good, bad = (json.dumps({**base, **fields}, ensure_ascii=False) for fields in (right, wrong))
    return judged(bad, context) < 0.7 * judged(good, context)


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
# Which category sells the most items: one name, the gold answer.
TOP_CATEGORY = "Qual categoria tem mais itens vendidos?"
GOLD_TOP = (
    "SELECT p.product_category_name FROM order_items i JOIN products p "
    "ON p.product_id = i.product_id GROUP BY 1 ORDER BY COUNT(*) DESC LIMIT 1"
)


def brl(value: float) -> str:
    return "R$ " + f"{value:,.2f}".replace(",", "_").replace(".", ",").replace("_", ".")


def explained(value: str | None) -> str:
    stated = f" O preço médio é de {value} por item." if value else ""
    return f"{QUERY}\nA consulta calcula o preço médio dos itens de beleza e saúde.{stated}"


def answered(database: str, answer: str, gold: str = GOLD, question: str = QUESTION) -> float:
    return score("sql_qa", answer, database=database, gold_sql=gold, question=question).total


def average_price(database: str) -> float:
    [(value,)] = execute(database, GOLD).rows or [(0.0,)]
    return value


def sent(answer: str, objective: str | None) -> float:
    return score("push", answer, push_objective=objective).total


# Too short for the length credit: its copies would earn it.
LINE = "- Revisar prazos no RJ."
ANALYSIS = (
    "## Diagnóstico\n- SP tem 1.210 pedidos e atraso de 4,1%.\n\n## Recomendações\n"
    "1. Priorizar a logística no RJ.\n2. Monitorar o atraso por estado."
)
# The same advice for any data: no group of the table, no number of it.
GENERIC = (
    "## Diagnóstico\n- Há estados com muitos pedidos e algum atraso.\n\n## Recomendações\n"
    "1. Priorizar a logística onde houver atraso.\n2. Monitorar o atraso por estado."
)
# An extraction-like object for a summary, its numbers copied from it.
COPIED = json.dumps({"estado": "SP", "pedidos": 1210, "atraso": "4,1%", "resumo": "SP lidera."})
SUMMARY = "| estado | pedidos | atraso |\n|---|---|---|\n| SP | 1210 | 4,1% |\n| RJ | 410 | 14,8% |"
# Categories of a state, for the claims rules: no probe reads this table.
CATEGORIES = (
    "Resumo de dados: categorias em PR\nPeríodo: 01/2017 a 06/2018; 480 pedidos\n\n"
    "| categoria | pedidos | ticket médio | frete médio | atraso | nota média |\n"
    "|---|---|---|---|---|---|\n"
    "| cama_mesa_banho | 120 | R$ 98,10 | R$ 17,40 | 3,2% | 4,1 |\n"
    "| esporte_lazer | 95 | R$ 140,55 | R$ 21,90 | 12,6% | 3,4 |\n"
    "| informatica_acessorios | 80 | R$ 160,20 | R$ 19,75 | 7,5% | 3,9 |"
)
SATISFACTION = "Analise a satisfação dos clientes e o que fazer para melhorá-la."
ON_RATINGS = (
    "## Satisfação\n- esporte_lazer tem a menor nota média: 3,4.\n"
    "- cama_mesa_banho tem a maior nota média: 4,1.\n\n**Ações**\n"
    "- Acompanhar os clientes insatisfeitos de esporte_lazer.\n"
    "- Levar a esporte_lazer o atendimento de cama_mesa_banho."
)


# The lowest rating's line, its number beside it.
LOWEST = "esporte_lazer tem a menor nota média: 3,4"


def analysed(text: str, focus: str | None = SATISFACTION) -> float:
    return score("insights", text, data_summary=CATEGORIES, analysis_focus=focus).total


FREE_SHIPPING = "oferecer frete grátis na próxima compra"
WIN_BACK = "trazer o cliente de volta com uma oferta"
APOLOGY = "pedir desculpas e oferecer ajuda"
ON_TIME = "tranquilizar sobre o prazo de entrega"
REMIND = "lembrar de avaliar o produto recebido"
SENDABLE = "Brasília, sua próxima compra de utilidades domésticas tem frete grátis! 🏠"
GOOD_JSON = json.dumps({**READING, "sentiment_score": 2}, ensure_ascii=False)


def _binary(verdict: Callable[..., rewards.Score]) -> Callable[..., rewards.Score]:
    """The v1 reward: all or nothing."""

    def all_or_nothing(*args: Any) -> rewards.Score:
        return rewards.Score(float(verdict(*args).total >= 0.99))

    return all_or_nothing


def _routed_by_words(verdict: Callable[..., rewards.Score]) -> Callable[..., rewards.Score]:
    """The V4.2 reports' classifier: a word of its push list sent a text to the push reward."""

    def routed(task: str, text: str, *rest: Any) -> rewards.Score:
        return verdict("push" if "reengaj" in fold(text) else task, text, *rest)

    return routed


NEVER = re.compile(r"(?!)")


def _setattr(target: Any, attribute: str, value: Any) -> Callable[[pytest.MonkeyPatch], None]:
    return lambda patch: patch.setattr(target, attribute, value)


def _each(*removals: Callable[[pytest.MonkeyPatch], None]) -> Callable[[pytest.MonkeyPatch], None]:
    def remove(patch: pytest.MonkeyPatch) -> None:
        for removal in removals:
            removal(patch)

    return remove


def _asked_by_mention(patch: pytest.MonkeyPatch) -> None:
    """A review request met by any word of a review ("sua avaliação é importante")."""
    for name in ("pedir uma avaliação da compra", REMIND):
        patch.setitem(
            push.OBJECTIVES, name, push.Objective("unreviewed", ((*push.REVIEW_REQUEST, "avali"),))
        )


@dataclass(frozen=True)
class Rule:
    name: str
    remove: Callable[[pytest.MonkeyPatch], None]
    # An answer of the rule's own, scored down by it: True while the rule holds.
    scores_down: Callable[[str], bool]
    probe: str


RULES = [
    Rule(
        "cut",
        _setattr(rewards, "CUT_KEEPS", dict.fromkeys(TASKS, 1.0)),
        lambda _: (
            score("insights", ANALYSIS, truncated=True).total < score("insights", ANALYSIS).total
        ),
        "cut_answer_scores_below_the_same_answer_ended",
    ),
    Rule(
        "repetition",
        _setattr(rewards, "REPETITION_PENALTY", 0.0),
        lambda _: judged(f"{reading()}\n{reading()}") < judged(reading()) - 0.05,
        "a_loop_costs_even_when_it_ended",
    ),
    Rule(
        "first instance",
        _setattr(rewards, "first_instance", lambda text: text[: common.SCAN_LIMIT]),
        lambda _: score("insights", "\n".join([LINE] * 3)).total < score("insights", LINE).total,
        "copies_earn_nothing",
    ),
    Rule(
        "a loop cut at the budget",
        _each(
            _setattr(rewards, "first_instance", lambda text: text[: common.SCAN_LIMIT]),
            _setattr(rewards, "REPETITION_PENALTY", 0.0),
        ),
        lambda database: (
            score(
                "sql_qa",
                "\n".join([explained(None)] * 4) + "\n" + explained(None)[:40],
                database=database,
                gold_sql=GOLD,
                question=QUESTION,
                truncated=True,
            ).total
            < 0.6 * answered(database, explained(None))
        ),
        "looping_earns_less_than_once",
    ),
    Rule(
        "opposite sentiment",
        _setattr(extraction, "OPPOSITE_KEEPS", 1.0),
        lambda _: judged(reading(sentiment="positivo")) < 0.5 * judged(reading()),
        "opposite_sentiment_costs",
    ),
    Rule(
        "hedge",
        _each(
            _setattr(extraction, "contradicts_itself", lambda *_: False),
            _setattr(review_evidence, "EXTREME_STARS", ()),
        ),
        lambda _: (
            judged(reading(sentiment="neutro", sentiment_score=3), {**REVIEW, "review_score": 1})
            < 0.7 * judged(reading(sentiment_score=1), {**REVIEW, "review_score": 1})
        ),
        "hedged_judgement_scores_below_a_reading",
    ),
    Rule(
        "constant judgement",
        _each(
            _setattr(extraction, "OPPOSITE_KEEPS", 1.0), _setattr(extraction, "MISSED_KEEPS", 1.0)
        ),
        lambda _: judged(json.dumps({**PRAISED, "sentiment_score": 2})) < 0.3 * judged(reading()),
        "constant_judgement_scores_far_below_a_reading",
    ),
    Rule(
        "denied complaint",
        _setattr(extraction, "MISSED_KEEPS", 1.0),
        lambda _: judged(reading(product_issue=False)) < 0.7 * judged(reading()),
        "missed_complaint_costs",
    ),
    Rule(
        "false alarm",
        _setattr(extraction, "INVENTED_KEEPS", 1.0),
        lambda _: judged(reading(delivery_issue=True)) < 0.7 * judged(reading()),
        "invented_complaint_costs",
    ),
    Rule(
        "praise rules out a complaint",
        _setattr(review_evidence, "RULED_OUT_BY_PRAISE", ()),
        lambda _: (
            judged(json.dumps({**PRAISED, "seller_issue": True}), HAPPY)
            < 0.7 * judged(json.dumps(PRAISED), HAPPY)
        ),
        "praise_rules_out_a_seller_flag",
    ),
    Rule(
        "recommendation ruled out",
        _setattr(review_evidence.Reading, "recommends_against_the_review", lambda *_: False),
        lambda _: judged(reading(would_recommend=True)) < 0.7 * judged(reading()),
        "recommending_a_complaint_costs",
    ),
    Rule(
        "negation",
        _setattr(common, "NEGATORS", ()),
        lambda _: (
            judged(json.dumps(PRAISED), PRAISE)
            > judged(json.dumps({**PRAISED, "product_issue": True}), PRAISE)
        ),
        "negation_is_read",
    ),
    Rule(
        "Portuguese decimals",
        _setattr(extraction, "normalize_pt_decimals", lambda text: text),
        lambda _: (
            score("extraction", GOOD_JSON.replace(": 2,", ": 2,5,", 1)).components["json"]
            == extraction.W_JSON
        ),
        "pt_decimal_parses",
    ),
    Rule(
        "an integer is no boolean",
        lambda patch: patch.setitem(
            extraction.VALUE_CHECKS, "sentiment_score", lambda v: isinstance(v, int)
        ),
        lambda _: (
            score(
                "extraction", GOOD_JSON.replace('"sentiment_score": 2', '"sentiment_score": false')
            ).total
            < score("extraction", GOOD_JSON).total
        ),
        "bool_is_not_an_integer",
    ),
    Rule(
        "a boolean is no echoed name",
        _each(
            *(
                lambda patch, name=name: patch.setitem(extraction.VALUE_CHECKS, name, bool)
                for name in review_evidence.ISSUES
            )
        ),
        lambda _: (
            score(
                "extraction", GOOD_JSON.replace('"product_issue": true', '"product_issue": "sim"')
            ).total
            < score("extraction", GOOD_JSON).total
        ),
        "echoed_string_is_not_a_boolean",
    ),
    Rule(
        "partial credit",
        lambda patch: patch.setattr(rewards, "_scorer_verdict", _binary(rewards._scorer_verdict)),
        lambda _: (
            0.0 < judged(GOOD_JSON[: GOOD_JSON.index('"delivered_late')] + "}") < judged(GOOD_JSON)
        ),
        "partial_answers_get_partial_credit",
    ),
    Rule(
        "the cap at one",
        _each(
            _setattr(rewards, "clamp01", lambda value: value),
            _setattr(extraction, "clamp01", lambda value: value),
            _setattr(extraction, "W_FORMAT", 1.0),
        ),
        lambda _: judged(reading()) <= 1.0,
        "rewards_are_capped_at_one",
    ),
    Rule(
        "routed by task",
        lambda patch: patch.setattr(
            rewards, "_scorer_verdict", _routed_by_words(rewards._scorer_verdict)
        ),
        lambda _: (
            score("insights", f"{ANALYSIS}\n3. Criar uma régua de reengajamento.").total
            > score("push", f"{ANALYSIS}\n3. Criar uma régua de reengajamento.").total
        ),
        "routed_by_task_not_text",
    ),
    Rule(
        "wrong result",
        _setattr(sql_qa, "WRONG_RESULT_KEEPS", 1.0),
        lambda database: (
            answered(database, explained(None).replace(CATEGORY, "perfumaria", 1))
            <= 0.5 * answered(database, explained(None))
        ),
        "sql_must_answer_the_question",
    ),
    Rule(
        "a query that runs",
        _setattr(sql_qa, "W_RUNS", 0.0),
        lambda database: (
            answered(database, explained(None).replace(CATEGORY, "perfumaria", 1))
            > answered(database, explained(None).replace("i.price", "i.preco"))
        ),
        "a_query_that_runs_beats_one_that_does_not",
    ),
    Rule(
        "the sandbox",
        _setattr(sql_qa, "execute", lambda *_: Execution(False, error="no such table")),
        lambda database: answered(database, "```sql\nDELETE FROM order_items;\n```") == 0.0,
        "hostile_sql_scores_zero",
    ),
    Rule(
        "the broad domain list",
        _setattr(sql_qa, "DOMAIN_STEMS", sql_qa.DOMAIN_STEMS[:10]),
        lambda database: (
            score(
                "sql_qa",
                f"{QUERY}\nMostra o preço e o desconto médio do estoque.",
                database=database,
            ).components["domain"]
            > sql_qa.W_DOMAIN / 2
        ),
        "sql_domain_vocabulary_is_broad",
    ),
    Rule(
        "invented SQL number",
        _setattr(sql_qa, "WRONG_NUMBER_KEEPS", 1.0),
        lambda database: (
            answered(database, explained(brl(average_price(database) + 17.3)))
            < answered(database, explained(None))
            < answered(database, explained(brl(average_price(database))))
        ),
        "invented_sql_number_costs",
    ),
    Rule(
        "second query",
        _each(
            _setattr(sql_qa, "SECOND_QUERY_KEEPS", 1.0), _setattr(sql_qa, "DISAGREEING_KEEPS", 1.0)
        ),
        lambda database: (
            answered(database, f"{explained(None)}\nOu ainda:\n{WITH_FREIGHT}")
            < 0.6 * answered(database, explained(None))
            and answered(database, f"{explained(None)}\nOu ainda:\n{SAME_AVERAGE}")
            < 0.8 * answered(database, explained(None))
        ),
        "second_query_costs",
    ),
    Rule(
        "an assumed answer",
        _setattr(sql_qa, "assumes_answer", lambda *_: False),
        lambda database: (
            answered(
                database,
                "```sql\nSELECT product_category_name FROM products "
                "WHERE product_category_name = 'cama_mesa_banho' LIMIT 1;\n```\n"
                "A categoria com mais itens vendidos é cama_mesa_banho.",
                GOLD_TOP,
                TOP_CATEGORY,
            )
            < 0.6
            * answered(
                database,
                f"```sql\n{GOLD_TOP};\n```\nA categoria com mais itens vendidos é cama_mesa_banho.",
                GOLD_TOP,
                TOP_CATEGORY,
            )
        ),
        "an_assumed_answer_earns_no_match",
    ),
    Rule(
        "an explanation held to its query",
        _setattr(sql_qa, "MISDESCRIBED_KEEPS", 1.0),
        lambda database: (
            answered(database, explained(None).replace("o preço médio", "a soma dos preços"))
            < 0.7 * answered(database, explained(None))
        ),
        "an_explanation_is_held_to_its_query",
    ),
    Rule(
        "ungrounded analysis numbers",
        _setattr(insights, "UNGROUNDED_PENALTY", 0.0),
        lambda _: (
            score(
                "insights", f"{ANALYSIS}\n- No geral, o atraso passa de 9,7%.", data_summary=SUMMARY
            ).total
            < score(
                "insights",
                f"{ANALYSIS}\n- No geral, o atraso passa de 14,8%.",
                data_summary=SUMMARY,
            ).total
            - 0.05
        ),
        "invented_insight_numbers_cost",
    ),
    Rule(
        "generic analysis",
        _setattr(insights, "GENERIC_KEEPS", 1.0),
        lambda _: (
            score("insights", GENERIC, data_summary=SUMMARY).total
            < 0.7
            * score("insights", f"{GENERIC}\n- O atraso chega a 14,8%.", data_summary=SUMMARY).total
        ),
        "an_analysis_cites_its_data",
    ),
    Rule(
        "another task's form",
        _setattr(insights, "another_task", lambda _: False),
        lambda _: score("insights", f"```json\n{COPIED}\n```", data_summary=SUMMARY).total == 0.0,
        "an_object_is_no_analysis",
    ),
    Rule(
        "superlatives held to the table",
        _setattr(table_claims, "_direction_claims", lambda *_: iter(())),
        lambda _: (
            analysed(ON_RATINGS.replace(LOWEST, "informatica_acessorios tem a menor nota média"))
            < 0.7 * analysed(ON_RATINGS.replace(LOWEST, "esporte_lazer tem a menor nota média"))
        ),
        "a_superlative_is_held_to_the_table",
    ),
    Rule(
        "comparisons held to the table",
        _setattr(table_claims, "_direction_claims", lambda *_: iter(())),
        lambda _: (
            analysed(f"{ON_RATINGS}\n- A nota de esporte_lazer é maior que a de cama_mesa_banho.")
            < 0.7
            * analysed(f"{ON_RATINGS}\n- A nota de esporte_lazer é menor que a de cama_mesa_banho.")
        ),
        "a_comparison_is_held_to_the_table",
    ),
    Rule(
        "values held to their group",
        _setattr(table_claims, "_value_claims", lambda *_: iter(())),
        lambda _: (
            analysed(f"{ON_RATINGS}\n- informatica_acessorios tem nota média de 4,1.")
            < 0.7 * analysed(f"{ON_RATINGS}\n- informatica_acessorios tem nota média de 3,9.")
        ),
        "a_number_beside_a_group_is_its_own",
    ),
    Rule(
        "a false claim costs",
        _setattr(insights, "FALSE_CLAIM_KEEPS", 1.0),
        lambda _: (
            analysed(f"{ON_RATINGS}\n- esporte_lazer tem o menor atraso: 12,6%.")
            < analysed(ON_RATINGS)
        ),
        "a_false_claim_costs_more_than_none",
    ),
    Rule(
        "advice where the table points",
        _setattr(insights, "targeted_actions", lambda *_: 0),
        lambda _: (
            analysed(
                ON_RATINGS.replace(" de esporte_lazer.", ".").replace(
                    "Levar a esporte_lazer o atendimento de cama_mesa_banho",
                    "Melhorar o atendimento",
                )
            )
            < analysed(ON_RATINGS) - 0.1
        ),
        "advice_goes_where_the_table_points",
    ),
    Rule(
        "the focus served",
        _setattr(insights, "FOCUS_IGNORED_KEEPS", 1.0),
        lambda _: (
            analysed(
                "## Volume\n- cama_mesa_banho concentra o maior volume: 120 pedidos.\n"
                "- informatica_acessorios tem o maior ticket médio: R$ 160,20.\n\n**Ações**\n"
                "- Investir em marketing em cama_mesa_banho.\n"
                "- Ampliar o sortimento de informatica_acessorios."
            )
            < 0.7 * analysed(ON_RATINGS)
        ),
        "the_focus_is_served",
    ),
    Rule(
        "courier praise",
        _setattr(
            review_evidence,
            "DELIVERY_PROBLEM",
            (*review_evidence.DELIVERY_PROBLEM, *review_evidence.COURIER),
        ),
        lambda _: read_better(
            "A transportadora foi super atenciosa e a panela é ótima.",
            5,
            {},
            {"delivery_issue": True},
        ),
        "courier_praise_is_no_delivery_problem",
    ),
    Rule(
        "a promise kept",
        _setattr(
            review_evidence,
            "SELLER_PROBLEM",
            (*review_evidence.SELLER_PROBLEM, *review_evidence.PROMISE),
        ),
        lambda _: read_better(
            "Recebi a panela como prometido, tudo certo.", 5, {}, {"seller_issue": True}
        ),
        "a_kept_promise_is_no_seller_failure",
    ),
    Rule(
        "a slow product",
        _setattr(review_evidence, "_delay_means", lambda *_: "delivery"),
        lambda _: read_better(
            "A chaleira demora muito para esquentar a água.",
            2,
            {"product_issue": True},
            {"delivery_issue": True},
        ),
        "a_slow_product_is_the_product_s_problem",
    ),
    Rule(
        "a loyal customer",
        _setattr(review_evidence, "ELSEWHERE", ()),
        lambda _: read_better(
            "Não compro mais em outro site, a panela chegou perfeita.",
            5,
            {},
            {"would_recommend": False},
        ),
        "a_loyal_customer_recommends",
    ),
    Rule(
        "an ironic recommendation",
        _setattr(review_evidence, "_IRONY", NEVER),
        lambda _: read_better(
            "Recomendo muito, pra quem gosta de esperar dois meses.",
            1,
            {},
            {"would_recommend": True},
        ),
        "an_ironic_recommendation_is_none",
    ),
    Rule(
        "an ignoring seller",
        _setattr(review_evidence, "SELLER_IGNORED", ()),
        lambda _: read_better(
            "Mandei três mensagens e a loja fingiu que não viu.",
            1,
            {"seller_issue": True},
            {"seller_issue": False},
        ),
        "an_ignoring_seller_is_a_seller_problem",
    ),
    Rule(
        "a summary turned around",
        _setattr(review_evidence.Reading, "summary_turns", lambda *_: False),
        lambda _: read_better(
            "A panela veio amassada.",
            1,
            {"product_issue": True},
            {"product_issue": True, "summary": "A panela veio perfeita, como na foto."},
        ),
        "a_summary_that_turns_the_review_around_costs",
    ),
    Rule(
        "a summary that adds",
        _setattr(review_evidence.Reading, "summary_adds", lambda *_: False),
        lambda _: read_better(
            "A panela veio amassada.",
            1,
            {"product_issue": True},
            {
                "product_issue": True,
                "summary": "A panela veio amassada e o vendedor não respondeu.",
            },
        ),
        "a_summary_that_adds_a_fact_costs",
    ),
    Rule(
        "several notifications",
        _setattr(push, "SEVERAL_KEEPS", 1.0),
        lambda _: (
            sent(f"{SENDABLE}\nOu: frete grátis pra você, Brasília!", FREE_SHIPPING)
            < 0.6 * sent(SENDABLE, FREE_SHIPPING)
        ),
        "push_is_one_sendable_message",
    ),
    Rule(
        "unsendable notification",
        _setattr(push, "UNSENDABLE_KEEPS", 1.0),
        lambda _: sent(SENDABLE.upper(), FREE_SHIPPING) < 0.6 * sent(SENDABLE, FREE_SHIPPING),
        "push_is_one_sendable_message",
    ),
    Rule(
        "push length",
        _setattr(push, "ZERO_CREDIT_AT", 10_000),
        lambda _: score("push", SENDABLE * 3).components["length"] == 0.0,
        "long_push_gets_no_length_credit",
    ),
    Rule(
        "formal push",
        _setattr(push, "FORMAL_PENALTY", 0.0),
        lambda _: sent("Cordialmente, " + SENDABLE, None) < sent(SENDABLE, None),
        "formal_push_is_penalised",
    ),
    Rule(
        "push objective",
        _setattr(push, "OFF_OBJECTIVE_KEEPS", 1.0),
        lambda _: (
            sent("Brasília, tem novidade em utilidades domésticas pra você! 🏠", FREE_SHIPPING)
            < 0.6 * sent(SENDABLE, FREE_SHIPPING)
        ),
        "push_is_held_to_its_objective",
    ),
    Rule(
        "push situation",
        _setattr(push, "RULED_OUT_KEEPS", 1.0),
        lambda _: (
            sent("Seu pedido de bebês chegou! Volte e ganhe 10% com o cupom VOLTA10", WIN_BACK)
            < 0.6 * sent("Volte pra gente: 10% em bebês com o cupom VOLTA10 👶", WIN_BACK)
        ),
        "push_respects_the_situation",
    ),
    Rule(
        "placeholders",
        _setattr(push, "PLACEHOLDER_KEEPS", 1.0),
        lambda _: (
            sent(SENDABLE.replace("Brasília", "[NOME]"), FREE_SHIPPING)
            < 0.6 * sent(SENDABLE, FREE_SHIPPING)
        ),
        "a_placeholder_costs",
    ),
    Rule(
        "unbacked promises",
        _setattr(push, "UNBACKED_KEEPS", 1.0),
        lambda _: all(
            sent(promised, objective) < 0.6 * sent(plain, objective)
            for plain, promised, objective in (
                (SENDABLE, SENDABLE.replace("! 🏠", ", válido até sexta! 🏠"), FREE_SHIPPING),
                (
                    "Recife, sua encomenda já está a caminho. Acompanhe pelo rastreio!",
                    "Recife, sua encomenda chega em 2 dias. Acompanhe pelo rastreio!",
                    ON_TIME,
                ),
                (
                    "Desculpe pelo problema, Ana! Fale com a gente que vamos ajudar.",
                    "Desculpe pelo problema, Ana! Fale com a gente: reembolso garantido.",
                    APOLOGY,
                ),
            )
        ),
        "an_unbacked_promise_costs",
    ),
    Rule(
        "refusals",
        _setattr(push, "REFUSAL_KEEPS", 1.0),
        lambda _: (
            sent("Desculpe, Ana. Sobre o atraso, consulte a transportadora.", APOLOGY)
            < 0.6 * sent("Desculpe, Ana! Fale com a gente que vamos resolver o atraso.", APOLOGY)
        ),
        "a_refusal_costs",
    ),
    Rule(
        "an offer given",
        _setattr(push, "offer_given", lambda _: True),
        lambda _: (
            sent("Frete grátis? Temos! 🏠", FREE_SHIPPING) < 0.6 * sent(SENDABLE, FREE_SHIPPING)
        ),
        "an_offer_is_given_not_advertised",
    ),
    Rule(
        "a review asked for",
        _asked_by_mention,
        lambda _: (
            sent("Avaliações ajudam outros clientes a escolher 🛋️", REMIND)
            < 0.6 * sent("Seu sofá chegou? Avalie sua compra em um minuto 🛋️", REMIND)
        ),
        "a_review_is_asked_for",
    ),
]


@pytest.fixture(autouse=True)
def fresh_readings():
    """Readings are cached (a score reads a review several times); a removed rule must read anew,
    and leave no reading of its own to the next test."""
    review_evidence.read_review.cache_clear()
    yield
    review_evidence.read_review.cache_clear()


@pytest.fixture(scope="module")
def database(prepared) -> str:
    store, manifest = prepared
    return str(store.path(manifest.database))


def _by_name(rule: Rule) -> str:
    return rule.name


def test_every_probe_has_a_rule_and_every_rule_a_probe() -> None:
    assert {rule.probe for rule in RULES} == set(PROBES)


@pytest.mark.parametrize("rule", RULES, ids=_by_name)
def test_the_rule_scores_its_answer_down(rule: Rule, database: str) -> None:
    assert rule.scores_down(database)
    assert run_probe(rule.probe, database) == {
        "passed": True,
        "broken": False,
        "why": PROBES[rule.probe].why,
    }


@pytest.mark.parametrize("rule", RULES, ids=_by_name)
def test_without_the_rule_its_answer_and_its_probe_fail(
    rule: Rule, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rule.remove(monkeypatch)
    review_evidence.read_review.cache_clear()
    assert not rule.scores_down(database)
    outcome = run_probe(rule.probe, database)
    assert not outcome["broken"], outcome["why"]  # caught by its check, not by a crash
    assert not outcome["passed"]


def test_a_probe_that_raises_is_broken_not_passed(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crashes(_: str) -> bool:
        raise KeyError("components")

    monkeypatch.setitem(
        PROBES, "crashes", PROBES["copies_earn_nothing"].__class__("a test", crashes)
    )
    outcome = run_probe("crashes", database)
    assert outcome["broken"] and not outcome["passed"]
    assert "raised KeyError" in outcome["why"]
