"""The audit gate's probes: one small case per bug class the V4.2 reports hit and per way a
reward can pay for shape instead of substance, each a named function that asserts the reward's
behaviour directly. A probe that raises is broken, not passed and not a caught rule: the gate
reports it as broken and fails (tests/test_reward_rules.py removes each rule and checks that its
probe fails, and does not raise)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import rewards
from rewards import extraction, score, sql_qa, sql_sandbox


@dataclass(frozen=True)
class Probe:
    why: str  # the bug class it guards against
    check: Callable[[str], bool]  # check(database): True when the reward behaves


PROBES: dict[str, Probe] = {}


def probe(why: str) -> Callable[[Callable[[str], bool]], Callable[[str], bool]]:
    """Registers the decorated check under its own name, with why it exists."""

    def register(check: Callable[[str], bool]) -> Callable[[str], bool]:
        PROBES[check.__name__] = Probe(why, check)
        return check

    return register


def run_probe(name: str, database: str) -> dict[str, Any]:
    """{"passed", "broken", "why"}: a probe that raises is broken (its reward crashed on it, or
    the probe itself is wrong), never a pass."""
    found = PROBES[name]
    try:
        return {"passed": bool(found.check(database)), "broken": False, "why": found.why}
    except Exception as exc:  # a crash is reported, it does not crash the gate
        return {
            "passed": False,
            "broken": True,
            "why": f"{found.why}; broken: raised {type(exc).__name__}: {exc}",
        }


def run_probes(database: str, only: str | None = None) -> dict[str, dict[str, Any]]:
    """Every probe's outcome (or the one named `only`), keyed `probe:<name>`."""
    return {f"probe:{name}": run_probe(name, database) for name in PROBES if only in (None, name)}


_GOOD_JSON = (
    '{"sentiment": "negativo", "sentiment_score": 1, "delivery_issue": true, "product_issue": '
    'true, "seller_issue": false, "delivered_late": true, "would_recommend": false, "churn_risk": '
    '"alto", "product_category": "moveis_decoracao", "summary": "Chegou quebrado."}'
)
_ANALYSIS = (
    "## Estratégia de reengajamento\n- Recomendo um cupom para clientes sem compra há 90 dias.\n"
    "- Priorizar clientes do RJ, onde a nota média caiu.\n- Acompanhar a recompra por estado."
)

_SQL_ONLY = (
    "```sql\nSELECT COUNT(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
    "WHERE c.customer_state = 'SP';\n```"
)
_COUNT_SP = _SQL_ONLY + "\nConta os pedidos de clientes de SP: o total de pedidos do estado."
_GOLD_SP = (
    "SELECT COUNT(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
    "WHERE c.customer_state = 'SP'"
)
_QUESTION_SP = "Quantos pedidos foram feitos por clientes do estado SP?"
# Alternatives to _SQL_ONLY: the same count written another way, and all orders counted.
_SAME_COUNT = _SQL_ONLY.replace("COUNT(*)", "COUNT(o.order_id)")
_ALL_ORDERS = "```sql\nSELECT COUNT(*) FROM orders;\n```"


# A one-star review that is all complaint: what the judgement probes read.
_COMPLAINT = {
    "review_score": 1,
    "review_text": "Não recebi meu produto\nComprei há um mês, não chegou e ninguém responde.",
    "gold_delivered_late": True,
    "gold_category": "moveis_decoracao",
}
_RIGHT_READING = (
    _GOOD_JSON.replace('"product_issue": true', '"product_issue": false')
    .replace('"seller_issue": false', '"seller_issue": true')
    .replace("Chegou quebrado.", "Não recebeu o produto e ninguém responde.")
)
# The same object, every judgement "all is well": what SmolLM2 said to every review.
_CONSTANT = (
    _RIGHT_READING.replace('"negativo"', '"positivo"')
    .replace("true", "false")
    .replace('"alto"', '"baixo"')
)
# The reading of a five-star review that names no problem.
_HAPPY_READING = (
    _RIGHT_READING.replace('"negativo"', '"positivo"')
    .replace('"sentiment_score": 1', '"sentiment_score": 5')
    .replace("true", "false")
    .replace('"would_recommend": false', '"would_recommend": true')
    .replace('"alto"', '"baixo"')
)
# The reading with "neutro": the hedge that cannot be wrong by much.
_NEUTRAL = _RIGHT_READING.replace('"negativo"', '"neutro"')
# A one-star review that says nothing a recommendation could be read from: the stars rule it out.
_STARS_ONLY_COMPLAINT = {**_COMPLAINT, "review_text": "Péssimo."}
# A one-star complaint of the product and the seller, of an order that came on time.
_BROKEN_ON_TIME = {
    **_COMPLAINT,
    "review_text": "Veio quebrado e o vendedor não responde.",
    "gold_delivered_late": False,
}
_BROKEN_ON_TIME_READING = (
    _GOOD_JSON.replace('"delivery_issue": true', '"delivery_issue": false')
    .replace('"delivered_late": true', '"delivered_late": false')
    .replace('"seller_issue": false', '"seller_issue": true')
    .replace("Chegou quebrado.", "Veio quebrado e o vendedor não responde.")
)
# One good answer per task, for the probes that hold a rule for every task.
_PUSH = "Seu pedido chegou! Conta pra gente o que achou 💙"
_REVIEW = "pedir uma avaliação da compra"
_UNHAPPY = "recuperar o cliente insatisfeito com um cupom"
# One line of an analysis: too short for the length credit, one structure mark.
_SHORT_ANALYSIS = "- Recomendo priorizar o RJ e revisar os prazos de entrega."
# The analysis with nothing of its summary: no group named, no number cited.
_GENERIC = (
    _ANALYSIS.replace("90 dias", "três meses")
    .replace("do RJ", "insatisfeitos")
    .replace(", onde a nota média caiu", "")
)
_SUMMARY_OBJECT = '{"estado": "RJ", "pedidos": 410, "atraso": "14,8%", "acao": "priorizar o RJ"}'
_SUMMARY = (
    "| estado | pedidos | atraso |\n|---|---|---|\n| SP | 1210 | 4,1% |\n| RJ | 410 | 14,8% |"
)


def _one_field_wrong_costs(
    right: str, wrong: str, context: dict[str, Any], reading: str = _RIGHT_READING
) -> bool:
    """The right reading with one judgement field turned wrong keeps under 0.7 of its score."""
    wrong_reading = reading.replace(right, wrong)
    assert wrong_reading != reading, right
    return (
        score("extraction", wrong_reading, **context).total
        < 0.7 * score("extraction", reading, **context).total
    )


def _sql(completion: str, database: str, **options: Any) -> rewards.Score:
    return score(
        "sql_qa",
        completion,
        database=database,
        gold_sql=_GOLD_SP,
        question=_QUESTION_SP,
        **options,
    )


def _stating(database: str, times: int | None = 1) -> str:
    """_SQL_ONLY explained with its count times `times` as Brazilians write it (the full public
    dataset holds about 14 times the shipped subset's orders), or with none."""
    [(count,)] = sql_sandbox.execute(database, _GOLD_SP).rows or [(0,)]
    stated = "" if times is None else f"{count * times:,} ".replace(",", ".")
    return _SQL_ONLY + f"\nSão {stated}pedidos de clientes de SP na base."


def _push(completion: str, objective: str) -> float:
    return score("push", completion, push_objective=objective).total


def _every_task(database: str) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        ("extraction", _RIGHT_READING, {**_COMPLAINT}),
        ("sql_qa", _COUNT_SP, {"database": database, "gold_sql": _GOLD_SP}),
        ("insights", _ANALYSIS, {}),
        ("push", _PUSH, {"push_objective": _REVIEW}),
    ]


def _loops(answer: str) -> str:
    """An answer said again and again until the budget cut it."""
    return "\n".join([answer] * 5) + "\n" + answer[: len(answer) // 2]


# A data summary and an analysis of it for its logistics focus: every claim true, every action
# where the table points.
_LOGISTICS = "Foque em logística: prazos, atrasos e frete."
_TABLE = (
    "Resumo de dados: estados em 2018\nPeríodo: 01/2018 a 06/2018; 1950 pedidos\n\n"
    "| estado | pedidos | ticket médio | frete médio | atraso | nota média |\n"
    "|---|---|---|---|---|---|\n"
    "| SP | 1210 | R$ 118,20 | R$ 15,10 | 4,1% | 4,2 |\n"
    "| RJ | 410 | R$ 131,50 | R$ 22,40 | 14,8% | 3,6 |\n"
    "| MG | 330 | R$ 120,10 | R$ 19,90 | 6,0% | 4,0 |"
)
_READ = (
    "## Logística\n- RJ tem o maior atraso: 14,8%.\n- RJ tem o maior frete médio: R$ 22,40.\n\n"
    "**Ações**\n- Revisar a logística de RJ e negociar o frete com as transportadoras.\n"
    "- Levar a RJ as práticas de entrega de SP."
)


def _analysis(completion: str, focus: str | None = _LOGISTICS) -> float:
    return score("insights", completion, data_summary=_TABLE, analysis_focus=focus).total


def _reading(review: str, stars: int, **fields: Any) -> tuple[str, dict[str, Any]]:
    """A reading of the review (every field right unless `fields` says otherwise), and the
    review as the reward's context."""
    record = {
        "sentiment_score": stars,
        "sentiment": "negativo" if stars <= 2 else "positivo" if stars >= 4 else "neutro",
        "delivery_issue": False,
        "product_issue": False,
        "seller_issue": False,
        "delivered_late": False,
        "would_recommend": stars >= 4,
        "churn_risk": "alto" if stars <= 2 else "baixo",
        "product_category": "relogios_presentes",
        "summary": review.split(".")[0] + ".",
        **fields,
    }
    context = {
        "review_score": stars,
        "review_text": review,
        "gold_delivered_late": False,
        "gold_category": "relogios_presentes",
    }
    return json.dumps(record, ensure_ascii=False), context


def _reads_better(review: str, stars: int, right: dict[str, Any], wrong: dict[str, Any]) -> bool:
    """The reading with `right` scores well above the same reading with `wrong`."""
    better, context = _reading(review, stars, **right)
    worse, _ = _reading(review, stars, **wrong)
    return (
        score("extraction", worse, **context).total
        < 0.7 * score("extraction", better, **context).total
    )


# "Qual estado tem mais pedidos?", answered by a query that computes it.
_MOST_ORDERS = "Qual estado tem mais pedidos?"
_GOLD_MOST = (
    "SELECT c.customer_state FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
    "GROUP BY c.customer_state ORDER BY COUNT(*) DESC LIMIT 1"
)
_GOLD_LATE_SP = (
    "SELECT ROUND(100.0 * AVG(CASE WHEN o.order_delivered_customer_date > "
    "o.order_estimated_delivery_date THEN 1.0 ELSE 0.0 END), 2) FROM orders o "
    "JOIN customers c ON c.customer_id = o.customer_id WHERE c.customer_state = 'SP' "
    "AND o.order_status = 'delivered' AND o.order_delivered_customer_date IS NOT NULL"
)
_FREE_SHIPPING = "oferecer frete grátis na próxima compra"
_APOLOGY = "pedir desculpas e oferecer ajuda"
_WIN_BACK = "trazer o cliente de volta com uma oferta"
_ON_ITS_WAY = "avisar que o pedido está a caminho"


@probe("V4: '4,5' made the whole JSON unparseable and extraction scored 0")
def pt_decimal_parses(_: str) -> bool:
    parsed = score("extraction", _GOOD_JSON.replace(": 1,", ": 4,5,", 1)).components["json"]
    return parsed == extraction.W_JSON  # parsed as it is, not only by json-repair's guess


@probe("V4.2.1: isinstance(True, int) let a boolean pass as sentiment_score")
def bool_is_not_an_integer(_: str) -> bool:
    return (
        score(
            "extraction", _GOOD_JSON.replace('"sentiment_score": 1', '"sentiment_score": true')
        ).total
        < score("extraction", _GOOD_JSON).total
    )


@probe('base model answered "delivery_issue": "delivery_issue"')
def echoed_string_is_not_a_boolean(_: str) -> bool:
    return (
        score("extraction", _GOOD_JSON.replace("true", '"delivery_issue"', 1)).total
        < score("extraction", _GOOD_JSON).total
    )


@probe("V4.2.1: an insights answer about 'reengajamento' was scored as a push notification")
def routed_by_task_not_text(_: str) -> bool:
    return score("insights", _ANALYSIS).total > score("push", _ANALYSIS).total


@probe("V4.2.1: 200+ character pushes still earned length credit")
def long_push_gets_no_length_credit(_: str) -> bool:
    return score("push", "Olá, " + "aproveite nossas novidades " * 10).components["length"] == 0.0


@probe("V4.2.1: formal e-mails (prezado, atenciosamente) passed as pushes")
def formal_push_is_penalised(_: str) -> bool:
    return (
        score("push", "Prezado cliente, seu pedido chegou. Atenciosamente.").components["formal"]
        < 0
    )


@probe(
    "V4.2: 'mentions SQL' scored like 'writes SQL'; the right result must dominate: a "
    "fluent answer to another question keeps at most half"
)
def sql_must_answer_the_question(database: str) -> bool:
    return (
        _sql(_COUNT_SP, database).components["match"] > 0
        and _sql(_COUNT_SP.replace("'SP'", "'RJ'"), database).components["match"] == 0
        and _sql(_COUNT_SP.replace("'SP'", "'RJ'"), database).total
        <= 0.5 * _sql(_COUNT_SP, database).total
    )


@probe(
    "any digit in the prose earned the numbers credit: an invented count paid as the right "
    "one, and more than stating none"
)
def invented_sql_number_costs(database: str) -> bool:
    return (
        _sql(_stating(database, times=14), database).total
        < _sql(_stating(database, times=None), database).total
        < _sql(_stating(database), database).total
    )


@probe("an answer offering a second query was scored on its first alone")
def second_query_costs(database: str) -> bool:
    return (
        _sql(f"{_COUNT_SP}\nOu:\n{_ALL_ORDERS}", database).total
        < _sql(f"{_COUNT_SP}\nOu:\n{_SAME_COUNT}", database).total
        < _sql(_COUNT_SP, database).total
    )


@probe("cpu_tiny's GRPO, when only a running wrong query lost credit: it learned to break queries")
def a_query_that_runs_beats_one_that_does_not(database: str) -> bool:
    return (
        _sql(_COUNT_SP.replace("'SP'", "'RJ'"), database).total
        > _sql(_COUNT_SP.replace("c.customer_state", "c.estado"), database).total
        > _sql("Os clientes de SP fizeram muitos pedidos.", database).total
    )


@probe("V4.2.1: a 10-word domain list scored good Portuguese SQL answers as off-topic")
def sql_domain_vocabulary_is_broad(database: str) -> bool:
    return math.isclose(
        # only words the hotfix added: the original ten would find none of them
        _sql(
            _SQL_ONLY + "\nMostra o faturamento total e o ticket de cada estado.", database
        ).components["domain"],
        sql_qa.W_DOMAIN,
    )


@probe("v2: the extraction reward reached 2.0 and dominated the other tasks' gradients")
def rewards_are_capped_at_one(database: str) -> bool:
    return all(
        score(task, text, database=database, **context).total <= 1.0
        for task, text, context in (
            ("extraction", _GOOD_JSON * 3, {"review_score": 1}),
            ("sql_qa", _COUNT_SP * 3, {"gold_sql": _GOLD_SP}),
            ("insights", _ANALYSIS * 3, {}),
            ("push", "Seu pedido chegou! 💙", {}),
        )
    )


@probe("v1: binary rewards gave whole groups the same score, so no gradient")
def partial_answers_get_partial_credit(_: str) -> bool:
    return (
        0.0
        < score("extraction", _GOOD_JSON[: _GOOD_JSON.index('"seller')] + "}").total
        < score("extraction", _GOOD_JSON).total
    )


@probe("model SQL runs against real tables: it must not write, attach or run forever")
def hostile_sql_scores_zero(database: str) -> bool:
    return all(
        _sql(f"```sql\n{hostile}\n```", database).total == 0
        for hostile in (
            "DROP TABLE orders",
            "ATTACH '/etc/passwd' AS p",
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
            "SELECT COUNT(*) FROM c",
        )
    )


@probe("SmolLM2's GRPO: answers cut at the token budget scored as high as ended ones")
def cut_answer_scores_below_the_same_answer_ended(database: str) -> bool:
    return all(
        score(task, text, truncated=True, **context).total
        < score(task, text, truncated=False, **context).total
        for task, text, context in _every_task(database)
    )


@probe("SmolLM2's GRPO: a query or object repeated until cut scored 1.0, like the answer once")
def looping_earns_less_than_once(database: str) -> bool:
    return all(
        score(task, _loops(text), truncated=True, **context).total
        < 0.6 * score(task, text, **context).total
        for task, text, context in _every_task(database)
    )


@probe('SmolLM2 said "positivo", no issue, to every review; the reward paid it 0.80-0.90')
def constant_judgement_scores_far_below_a_reading(_: str) -> bool:
    return (
        score("extraction", _CONSTANT, **_COMPLAINT).total
        < 0.3 * score("extraction", _RIGHT_READING, **_COMPLAINT).total
    )


@probe('SmolLM2\'s GRPO said "neutro" to every review, its stars copied right: paid 0.74 here')
def hedged_judgement_scores_below_a_reading(_: str) -> bool:
    return (
        score("extraction", _NEUTRAL, **_COMPLAINT).total
        < 0.3 * score("extraction", _RIGHT_READING, **_COMPLAINT).total
        and score(
            "extraction",
            _NEUTRAL.replace('"sentiment_score": 1', '"sentiment_score": 3'),
            **_COMPLAINT,
        ).total
        < 0.7 * score("extraction", _RIGHT_READING, **_COMPLAINT).total
    )


@probe("sentiment right, the delivery problem that is the whole review missed: paid 1.0")
def missed_complaint_costs(_: str) -> bool:
    return _one_field_wrong_costs('"delivery_issue": true', '"delivery_issue": false', _COMPLAINT)


@probe("SmolLM2's GRPO flagged delivery on 79 of 80 reviews: a false alarm cost 0.03 here")
def invented_complaint_costs(_: str) -> bool:
    return _one_field_wrong_costs(
        '"delivery_issue": false',
        '"delivery_issue": true',
        _BROKEN_ON_TIME,
        _BROKEN_ON_TIME_READING,
    )


@probe("SmolLM2's GRPO flagged a seller problem on 53 of 80 reviews: on praise it cost 0.03")
def praise_rules_out_a_seller_flag(_: str) -> bool:
    return all(
        score("extraction", flagged, review_score=5, review_text=text).total
        < 0.7 * score("extraction", answer, review_score=5, review_text=text).total
        for text, answer in (("Produto excelente, adorei! Recomendo a todos.", _HAPPY_READING),)
        for flagged in (
            answer.replace('"seller_issue": false', '"seller_issue": true'),
            answer.replace('"product_issue": false', '"product_issue": true'),
        )
    )


@probe("SmolLM2's GRPO said 49 of 51 one- and two-star customers would recommend the shop")
def recommending_a_complaint_costs(_: str) -> bool:
    return _one_field_wrong_costs(
        '"would_recommend": false', '"would_recommend": true', _STARS_ONLY_COMPLAINT
    )


@probe('V4.2.1: the V4.2 reports\' rule paid a constant "positivo" 0.80 on a one-star complaint')
def opposite_sentiment_costs(_: str) -> bool:
    return (
        score("extraction", _RIGHT_READING.replace('"negativo"', '"positivo"'), **_COMPLAINT).total
        < 0.5 * score("extraction", _RIGHT_READING, **_COMPLAINT).total
    )


@probe("SmolLM2's GRPO: an object said twice scored as the object once")
def a_loop_costs_even_when_it_ended(_: str) -> bool:
    return (
        score("extraction", f"{_RIGHT_READING}\n{_RIGHT_READING}", **_COMPLAINT).total
        < score("extraction", _RIGHT_READING, **_COMPLAINT).total - 0.1
    )


@probe("copies of a short analysis earned the length and structure that the analysis once lacks")
def copies_earn_nothing(_: str) -> bool:
    return (
        score("insights", "\n".join([_SHORT_ANALYSIS] * 3)).total
        < score("insights", _SHORT_ANALYSIS).total
    )


@probe("an analysis citing figures its data summary does not hold scored as a grounded one")
def invented_insight_numbers_cost(_: str) -> bool:
    return (
        score("insights", f"{_ANALYSIS}\n- O atraso chega a 37%.", data_summary=_SUMMARY).total
        < score("insights", f"{_ANALYSIS}\n- O atraso chega a 14,8%.", data_summary=_SUMMARY).total
        - 0.1
    )


@probe("an analysis that cites none of its summary's numbers scored as one that reads them")
def an_analysis_cites_its_data(_: str) -> bool:
    return (
        score("insights", _GENERIC, data_summary=_SUMMARY).total
        < 0.7
        * score(
            "insights", f"{_GENERIC}\n- No RJ o atraso é de 14,8%.", data_summary=_SUMMARY
        ).total
    )


@probe("an extraction object written for a data summary scored 0.37 as an analysis")
def an_object_is_no_analysis(_: str) -> bool:
    return score("insights", _SUMMARY_OBJECT, data_summary=_SUMMARY).total == 0.0


@probe("several options, Spanish, shouting or hashtags scored as one notification")
def push_is_one_sendable_message(_: str) -> bool:
    return all(
        _push(bad, _REVIEW) < 0.6 * _push(_PUSH, _REVIEW)
        for bad in (
            f"{_PUSH}\nOu: Conta pra gente o que achou 💙",
            "¡Tu pedido llegó! Cuéntanos qué te pareció y gana un cupón.",
            _PUSH.upper(),
        )
    )


@probe("the push reward read no context: an offer scored above the review it was asked for")
def push_is_held_to_its_objective(_: str) -> bool:
    return _push(
        "Seu pedido chegou! Use o cupom VOLTA10 na próxima compra 💙", _REVIEW
    ) < 0.6 * _push(_PUSH, _REVIEW)


@probe("praise-seeking with the unhappy customer scored as the apology with the coupon")
def push_respects_the_situation(_: str) -> bool:
    return _push(
        "Adorou a compra? Avalie com 5 estrelas e use o cupom VOLTA10 💙", _UNHAPPY
    ) < 0.6 * _push("Sentimos muito! Use o cupom VOLTA10 na próxima compra 💙", _UNHAPPY)


@probe('"não tive nenhum problema" is no problem; "sem defeito" is no product issue')
def negation_is_read(_: str) -> bool:
    return all(
        score("extraction", answer, review_score=5, review_text=text).total
        > score(
            "extraction", answer.replace("false", "true"), review_score=5, review_text=text
        ).total
        for text, answer in (
            ("Não tive nenhum problema, chegou antes do prazo e sem defeito.", _HAPPY_READING),
        )
    )


@probe("the SFT model's insights named the wrong 'highest delay' group and scored 1.00")
def a_superlative_is_held_to_the_table(_: str) -> bool:
    wrong = _READ.replace("RJ tem o maior atraso: 14,8%", "SP tem o maior atraso: 4,1%")
    return _analysis(wrong) < 0.7 * _analysis(_READ)


@probe("a comparison the table contradicts scored as one it supports")
def a_comparison_is_held_to_the_table(_: str) -> bool:
    right, wrong = (f"{_READ}\n- {a} atrasa mais que {b}." for a, b in (("RJ", "SP"), ("SP", "RJ")))
    return _analysis(wrong) < 0.7 * _analysis(right)


@probe("a figure written beside the wrong group ('RJ: 4,1%' for SP's) scored as the right one")
def a_number_beside_a_group_is_its_own(_: str) -> bool:
    right, wrong = (f"{_READ}\n- SP tem atraso de {v}." for v in ("4,1%", "14,8%"))
    return _analysis(wrong) < 0.7 * _analysis(right)


@probe("a false claim about the data cost nothing beside true ones")
def a_false_claim_costs_more_than_none(_: str) -> bool:
    return _analysis(f"{_READ}\n- MG tem a menor nota média: 4,0.") < _analysis(_READ)


@probe("advice that names no group of the table scored as advice where the table points")
def advice_goes_where_the_table_points(_: str) -> bool:
    generic = _READ.replace("de RJ e", "e").replace(
        "Levar a RJ as práticas de entrega de SP", "Levar as boas práticas de entrega a todos"
    )
    return _analysis(generic) < _analysis(_READ) - 0.1


@probe("the logistics focus answered with marketing scored as an answer to it")
def the_focus_is_served(_: str) -> bool:
    marketing = (
        "## Marketing\n- SP concentra o maior volume: 1210 pedidos.\n"
        "- RJ tem o maior ticket médio: R$ 131,50.\n\n**Ações**\n"
        "- Investir em marketing em SP.\n- Ampliar o sortimento em RJ."
    )
    return _analysis(marketing) < 0.7 * _analysis(_READ) and _analysis(
        marketing, focus=None
    ) > 0.7 * _analysis(_READ, focus=None)


@probe("praise of the courier ('o entregador foi muito educado') read as a delivery problem")
def courier_praise_is_no_delivery_problem(_: str) -> bool:
    review = "O entregador foi muito educado e o relógio é lindo."
    return _reads_better(review, 5, {}, {"delivery_issue": True})


@probe("a promise kept ('cumpriu com o prometido') read as a seller failure")
def a_kept_promise_is_no_seller_failure(_: str) -> bool:
    review = "Cumpriu com o prometido e chegou antes do prazo."
    return _reads_better(review, 5, {}, {"seller_issue": True})


@probe("a product that misbehaves in delay words ('o relógio atrasa') read as a late delivery")
def a_slow_product_is_the_product_s_problem(_: str) -> bool:
    review = "O relógio atrasa uns 5 minutos por dia."
    return _reads_better(
        review, 2, {"product_issue": True}, {"delivery_issue": True, "product_issue": False}
    )


@probe("'nunca mais compro em outra loja' read as a customer who will not recommend")
def a_loyal_customer_recommends(_: str) -> bool:
    review = "Nunca mais compro em outra loja, só aqui!"
    return _reads_better(review, 5, {}, {"would_recommend": False})


@probe("an ironic recommendation ('recomendo... só que não') read as one")
def an_ironic_recommendation_is_none(_: str) -> bool:
    review = "Recomendo... só que não. Veio tudo errado."
    return _reads_better(review, 1, {}, {"would_recommend": True})


@probe("a seller who ignored the customer missed")
def an_ignoring_seller_is_a_seller_problem(_: str) -> bool:
    review = "O vendedor ignorou todas as minhas mensagens."
    return _reads_better(review, 1, {"seller_issue": True}, {"seller_issue": False})


@probe("a summary saying the opposite of the review scored as a faithful one (one shared stem)")
def a_summary_that_turns_the_review_around_costs(_: str) -> bool:
    review = "O relógio chegou quebrado e atrasado."
    right = {"delivery_issue": True, "product_issue": True}
    return _reads_better(
        review, 1, right, {**right, "summary": "O relógio chegou perfeito e no prazo."}
    )


@probe("a summary adding a fact the review does not hold scored as a faithful one")
def a_summary_that_adds_a_fact_costs(_: str) -> bool:
    review = "O relógio chegou quebrado."
    right = {"product_issue": True}
    added = {**right, "summary": "O relógio chegou quebrado e a loja devolveu o dinheiro."}
    return _reads_better(review, 1, right, added)


@probe("a query that filters on the answer it is asked for, or selects it, matched the gold")
def an_assumed_answer_earns_no_match(database: str) -> bool:
    def answered(query: str) -> float:
        text = f"```sql\n{query};\n```\nO estado com mais pedidos é SP."
        return score(
            "sql_qa", text, database=database, gold_sql=_GOLD_MOST, question=_MOST_ORDERS
        ).total

    computed = answered(_GOLD_MOST)
    return all(
        answered(query) < 0.6 * computed
        for query in (
            "SELECT customer_state FROM customers WHERE customer_state = 'SP' LIMIT 1",
            "SELECT 'SP' AS estado",
        )
    )


@probe("an explanation calling a late rate an on-time rate cost nothing")
def an_explanation_is_held_to_its_query(database: str) -> bool:
    [(rate,)] = sql_sandbox.execute(database, _GOLD_LATE_SP).rows or [(0.0,)]
    written = f"{rate:.2f}".replace(".", ",")

    def explained(what: str) -> float:
        text = (
            f"```sql\n{_GOLD_LATE_SP};\n```\n"
            f"A consulta calcula a porcentagem de pedidos de SP {what}: {written}%."
        )
        return score("sql_qa", text, database=database, gold_sql=_GOLD_LATE_SP).total

    return explained("entregues no prazo") < 0.7 * explained("entregues com atraso")


@probe("a template with its placeholders left in scored as a notification")
def a_placeholder_costs(_: str) -> bool:
    filled = "Curitiba, sua próxima compra tem frete grátis! Aproveite 🚚"
    return _push(filled.replace("Curitiba", "{nome}"), _FREE_SHIPPING) < 0.6 * _push(
        filled, _FREE_SHIPPING
    )


@probe("a promise no data backs ('Só hoje!', 'chega amanhã', a guarantee, a refund) cost nothing")
def an_unbacked_promise_costs(_: str) -> bool:
    free = "Curitiba, sua próxima compra tem frete grátis! Aproveite 🚚"
    way = "Curitiba, seu pedido de relógios está a caminho! Acompanhe no app."
    return all(
        _push(promised, objective) < 0.6 * _push(plain, objective)
        for plain, promised, objective in (
            (free, free.replace("Aproveite", "Só hoje"), _FREE_SHIPPING),
            (way, way.replace("Acompanhe no app", "Chega amanhã"), _ON_ITS_WAY),
            (way, way.replace("Acompanhe no app", "Entrega com garantia total"), _ON_ITS_WAY),
        )
    )


@probe("a refusal of help ('não podemos fazer nada') scored as an apology with help")
def a_refusal_costs(_: str) -> bool:
    helped = "Sentimos muito pelo seu pedido! Fale com a gente e vamos ajudar."
    refused = "Sentimos muito, mas não podemos fazer nada pelo seu pedido."
    return _push(refused, _APOLOGY) < 0.6 * _push(helped, _APOLOGY)


@probe("an offer advertised ('temos cupons incríveis') scored as one given to the customer")
def an_offer_is_given_not_advertised(_: str) -> bool:
    given = "Volta pra gente? Separamos um cupom de desconto pra você 💙"
    advertised = "Temos cupons e ofertas incríveis no app! 💙"
    return _push(advertised, _WIN_BACK) < 0.6 * _push(given, _WIN_BACK)


@probe("'sua avaliação é importante' scored as a request to review")
def a_review_is_asked_for(_: str) -> bool:
    asked = "Seu pedido chegou? Conta pra gente o que achou! ⭐"
    return _push("Sua avaliação é muito importante para nós! ⭐", _REVIEW) < 0.6 * _push(
        asked, _REVIEW
    )
