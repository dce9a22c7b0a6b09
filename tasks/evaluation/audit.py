"""Step 2: the reward audit gate. If the rewards disagree with people, nothing is trained.

Three checks. (1) Rank agreement: per task, Spearman's rho between the reward and human scores on
the shipped audit set (data/audit/audit.jsonl) must reach the recipe's threshold. (2) Pairs: two
answers to one input that a person orders (data/audit/pairs.jsonl: a constant judgement and a
right one, a looping answer and the same answer ended, ...) must be ordered the same way by the
reward, in at least the recipe's share of pairs. (3) Probes: one small case per bug class the seed
reports hit, and per way a reward can pay for shape instead of substance, each asserting the
reward's behaviour directly.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_table_artifact
from scipy.stats import spearmanr

import rewards
from configs.recipe import AuditConfig
from rewards import TASKS, score, sql_qa, sql_sandbox
from tasks.core.caching import PROJECT_ROOT, ContentKey
from tasks.core.manifests import AuditResult
from tasks.evaluation.score_logs import SHIPPED_DATA, shipped_database

AUDIT_SET = PROJECT_ROOT / "data" / "audit" / "audit.jsonl"
AUDIT_PAIRS = PROJECT_ROOT / "data" / "audit" / "pairs.jsonl"
WORST_SHOWN = 3


class AuditFailed(RuntimeError):
    """The rewards disagree with the human scores or a probe failed: do not train."""


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
_UNNUMBERED = _ANALYSIS.replace("90 dias", "três meses")
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


# name -> (why it exists, check(database) returning True when the reward behaves)
PROBES: dict[str, tuple[str, Callable[[str], bool]]] = {
    "pt_decimal_parses": (
        "V4: '4,5' made the whole JSON unparseable and extraction scored 0",
        lambda _: (
            score("extraction", _GOOD_JSON.replace(": 1,", ": 4,5,", 1)).components["json"] > 0
        ),
    ),
    "bool_is_not_an_integer": (
        "V4.2.1: isinstance(True, int) let a boolean pass as sentiment_score",
        lambda _: (
            score(
                "extraction", _GOOD_JSON.replace('"sentiment_score": 1', '"sentiment_score": true')
            ).total
            < score("extraction", _GOOD_JSON).total
        ),
    ),
    "echoed_string_is_not_a_boolean": (
        'base model answered "delivery_issue": "delivery_issue"',
        lambda _: (
            score("extraction", _GOOD_JSON.replace("true", '"delivery_issue"', 1)).total
            < score("extraction", _GOOD_JSON).total
        ),
    ),
    "routed_by_task_not_text": (
        "V4.2.1: an insights answer about 'reengajamento' was scored as a push notification",
        lambda _: score("insights", _ANALYSIS).total > score("push", _ANALYSIS).total,
    ),
    "long_push_gets_no_length_credit": (
        "V4.2.1: 200+ character pushes still earned length credit",
        lambda _: (
            score("push", "Olá, " + "aproveite nossas novidades " * 10).components["length"] == 0.0
        ),
    ),
    "formal_push_is_penalised": (
        "V4.2.1: formal e-mails (prezado, atenciosamente) passed as pushes",
        lambda _: (
            score("push", "Prezado cliente, seu pedido chegou. Atenciosamente.").components[
                "formal"
            ]
            < 0
        ),
    ),
    "sql_must_answer_the_question": (
        "V4.2: 'mentions SQL' scored like 'writes SQL'; the right result must dominate: a "
        "fluent answer to another question keeps at most half",
        lambda db: (
            _sql(_COUNT_SP, db).components["match"] > 0
            and _sql(_COUNT_SP.replace("'SP'", "'RJ'"), db).components["match"] == 0
            and _sql(_COUNT_SP.replace("'SP'", "'RJ'"), db).total <= 0.5 * _sql(_COUNT_SP, db).total
        ),
    ),
    "invented_sql_number_costs": (
        "any digit in the prose earned the numbers credit: an invented count paid as the right "
        "one, and more than stating none",
        lambda db: (
            _sql(_stating(db, times=14), db).total
            < _sql(_stating(db, times=None), db).total
            < _sql(_stating(db), db).total
        ),
    ),
    "second_query_costs": (
        "an answer offering a second query was scored on its first alone",
        lambda db: (
            _sql(f"{_COUNT_SP}\nOu:\n{_ALL_ORDERS}", db).total
            < _sql(f"{_COUNT_SP}\nOu:\n{_SAME_COUNT}", db).total
            < _sql(_COUNT_SP, db).total
        ),
    ),
    "a_query_that_runs_beats_one_that_does_not": (
        "cpu_tiny's GRPO, when only a running wrong query lost credit: it learned to break queries",
        lambda db: (
            _sql(_COUNT_SP.replace("'SP'", "'RJ'"), db).total
            > _sql(_COUNT_SP.replace("SELECT", "SELEC"), db).total
            > _sql("Os clientes de SP fizeram muitos pedidos.", db).total
        ),
    ),
    "sql_domain_vocabulary_is_broad": (
        "V4.2.1: a 10-word domain list scored good Portuguese SQL answers as off-topic",
        lambda db: math.isclose(
            # only words the hotfix added: the original ten would find none of them
            _sql(
                _SQL_ONLY + "\nMostra o faturamento total e o ticket de cada estado.", db
            ).components["domain"],
            sql_qa.W_DOMAIN,
        ),
    ),
    "rewards_are_capped_at_one": (
        "v2: the extraction reward reached 2.0 and dominated the other tasks' gradients",
        lambda db: all(
            score(task, text, database=db, **context).total <= 1.0
            for task, text, context in (
                ("extraction", _GOOD_JSON * 3, {"review_score": 1}),
                ("sql_qa", _COUNT_SP * 3, {"gold_sql": _GOLD_SP}),
                ("insights", _ANALYSIS * 3, {}),
                ("push", "Seu pedido chegou! 💙", {}),
            )
        ),
    ),
    "partial_answers_get_partial_credit": (
        "v1: binary rewards gave whole groups the same score, so no gradient",
        lambda _: (
            0.0
            < score("extraction", _GOOD_JSON[: _GOOD_JSON.index('"seller')] + "}").total
            < score("extraction", _GOOD_JSON).total
        ),
    ),
    "hostile_sql_scores_zero": (
        "model SQL runs against real tables: it must not write, attach or run forever",
        lambda db: all(
            _sql(f"```sql\n{hostile}\n```", db).total == 0
            for hostile in (
                "DROP TABLE orders",
                "ATTACH '/etc/passwd' AS p",
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                "SELECT COUNT(*) FROM c",
            )
        ),
    ),
    "cut_answer_scores_below_the_same_answer_ended": (
        "SmolLM2's GRPO: answers cut at the token budget scored as high as ended ones",
        lambda db: all(
            score(task, text, truncated=True, **context).total
            < score(task, text, truncated=False, **context).total
            for task, text, context in _every_task(db)
        ),
    ),
    "looping_earns_less_than_once": (
        "SmolLM2's GRPO: a query or object repeated until cut scored 1.0, like the answer once",
        lambda db: all(
            score(task, _loops(text), truncated=True, **context).total
            < 0.6 * score(task, text, **context).total
            for task, text, context in _every_task(db)
        ),
    ),
    "constant_judgement_scores_far_below_a_reading": (
        'SmolLM2 said "positivo", no issue, to every review; the reward paid it 0.80-0.90',
        lambda _: (
            score("extraction", _CONSTANT, **_COMPLAINT).total
            < 0.3 * score("extraction", _RIGHT_READING, **_COMPLAINT).total
        ),
    ),
    "hedged_judgement_scores_below_a_reading": (
        'SmolLM2\'s GRPO said "neutro" to every review, its stars copied right: paid 0.74 here',
        lambda _: (
            score("extraction", _NEUTRAL, **_COMPLAINT).total
            < 0.3 * score("extraction", _RIGHT_READING, **_COMPLAINT).total
            and score(
                "extraction",
                _NEUTRAL.replace('"sentiment_score": 1', '"sentiment_score": 3'),
                **_COMPLAINT,
            ).total
            < 0.7 * score("extraction", _RIGHT_READING, **_COMPLAINT).total
        ),
    ),
    "missed_complaint_costs": (
        "sentiment right, the delivery problem that is the whole review missed: paid 1.0",
        lambda _: _one_field_wrong_costs(
            '"delivery_issue": true', '"delivery_issue": false', _COMPLAINT
        ),
    ),
    "invented_complaint_costs": (
        "SmolLM2's GRPO flagged delivery on 79 of 80 reviews: a false alarm cost 0.03 here",
        lambda _: _one_field_wrong_costs(
            '"delivery_issue": false',
            '"delivery_issue": true',
            _BROKEN_ON_TIME,
            _BROKEN_ON_TIME_READING,
        ),
    ),
    "praise_rules_out_a_seller_flag": (
        "SmolLM2's GRPO flagged a seller problem on 53 of 80 reviews: on praise it cost 0.03",
        lambda _: all(
            score("extraction", flagged, review_score=5, review_text=text).total
            < 0.7 * score("extraction", answer, review_score=5, review_text=text).total
            for text, answer in (("Produto excelente, adorei! Recomendo a todos.", _HAPPY_READING),)
            for flagged in (
                answer.replace('"seller_issue": false', '"seller_issue": true'),
                answer.replace('"product_issue": false', '"product_issue": true'),
            )
        ),
    ),
    "recommending_a_complaint_costs": (
        "SmolLM2's GRPO said 49 of 51 one- and two-star customers would recommend the shop",
        lambda _: _one_field_wrong_costs(
            '"would_recommend": false', '"would_recommend": true', _STARS_ONLY_COMPLAINT
        ),
    ),
    "opposite_sentiment_costs": (
        'V4.2.1: the seed\'s rule paid a constant "positivo" 0.80 on a one-star complaint',
        lambda _: (
            score(
                "extraction", _RIGHT_READING.replace('"negativo"', '"positivo"'), **_COMPLAINT
            ).total
            < 0.5 * score("extraction", _RIGHT_READING, **_COMPLAINT).total
        ),
    ),
    "a_loop_costs_even_when_it_ended": (
        "SmolLM2's GRPO: an object said twice scored as the object once",
        lambda _: (
            score("extraction", f"{_RIGHT_READING}\n{_RIGHT_READING}", **_COMPLAINT).total
            < score("extraction", _RIGHT_READING, **_COMPLAINT).total - 0.1
        ),
    ),
    "copies_earn_nothing": (
        "copies of a short analysis earned the length and structure that the analysis once lacks",
        lambda _: (
            score("insights", "\n".join([_SHORT_ANALYSIS] * 3)).total
            < score("insights", _SHORT_ANALYSIS).total
        ),
    ),
    "invented_insight_numbers_cost": (
        "an analysis citing figures its data summary does not hold scored as a grounded one",
        lambda _: (
            score("insights", f"{_ANALYSIS}\n- O RJ (410) caiu 37%.", data_summary=_SUMMARY).total
            < score(
                "insights", f"{_ANALYSIS}\n- O RJ (410) caiu 14,8%.", data_summary=_SUMMARY
            ).total
            - 0.1
        ),
    ),
    "an_analysis_cites_its_data": (
        "an analysis that cites none of its summary's numbers scored as one that reads them",
        lambda _: (
            score("insights", _UNNUMBERED, data_summary=_SUMMARY).total
            < 0.7 * score("insights", f"{_UNNUMBERED} (14,8%)", data_summary=_SUMMARY).total
        ),
    ),
    "an_object_is_no_analysis": (
        "an extraction object written for a data summary scored 0.37 as an analysis",
        lambda _: score("insights", _SUMMARY_OBJECT, data_summary=_SUMMARY).total == 0.0,
    ),
    "push_is_one_sendable_message": (
        "several options, Spanish, shouting or hashtags scored as one notification",
        lambda _: all(
            _push(bad, _REVIEW) < 0.6 * _push(_PUSH, _REVIEW)
            for bad in (
                f"{_PUSH}\nOu: Conta pra gente o que achou 💙",
                "¡Tu pedido llegó! Cuéntanos qué te pareció y gana un cupón.",
                _PUSH.upper(),
            )
        ),
    ),
    "push_is_held_to_its_objective": (
        "the push reward read no context: an offer scored above the review it was asked for",
        lambda _: (
            _push("Seu pedido chegou! Use o cupom VOLTA10 na próxima compra 💙", _REVIEW)
            < 0.6 * _push(_PUSH, _REVIEW)
        ),
    ),
    "push_respects_the_situation": (
        "praise-seeking with the unhappy customer scored as the apology with the coupon",
        lambda _: (
            _push("Adorou a compra? Avalie com 5 estrelas e use o cupom VOLTA10 💙", _UNHAPPY)
            < 0.6 * _push("Sentimos muito! Use o cupom VOLTA10 na próxima compra 💙", _UNHAPPY)
        ),
    ),
    "negation_is_read": (
        '"não tive nenhum problema" is no problem; "sem defeito" is no product issue',
        lambda _: all(
            score("extraction", answer, review_score=5, review_text=text).total
            > score(
                "extraction", answer.replace("false", "true"), review_score=5, review_text=text
            ).total
            for text, answer in (
                ("Não tive nenhum problema, chegou antes do prazo e sem defeito.", _HAPPY_READING),
            )
        ),
    ),
}


def _run_probe(why: str, check: Callable[[str], bool], database: str) -> dict[str, Any]:
    try:
        return {"passed": bool(check(database)), "why": why}
    except (
        Exception
    ) as exc:  # a reward that crashes on a probe fails it, it does not crash the gate
        return {"passed": False, "why": f"{why}; raised {type(exc).__name__}: {exc}"}


def run_probes(database: str, only: str | None = None) -> dict[str, dict[str, Any]]:
    """Every probe's outcome (or the one named `only`), keyed `probe:<name>`."""
    return {
        f"probe:{name}": _run_probe(why, check, database)
        for name, (why, check) in PROBES.items()
        if only in (None, name)
    }


def _numbered_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            yield number, json.loads(line)


def load_audit_set(path: Path = AUDIT_SET) -> list[dict[str, Any]]:
    rows = []
    for number, row in _numbered_lines(path):
        if row.get("task") not in TASKS or not 0 <= row.get("human_score", -1) <= 1:
            raise ValueError(f"{path}:{number}: needs a known task and a human_score in [0, 1]")
        rows.append(row)
    return rows


def load_pairs(path: Path = AUDIT_PAIRS) -> list[dict[str, Any]]:
    pairs = []
    for number, pair in _numbered_lines(path):
        sides = (pair.get("better"), pair.get("worse"))
        if pair.get("task") not in TASKS or not all(
            isinstance(side, dict) and isinstance(side.get("completion"), str) for side in sides
        ):
            raise ValueError(f"{path}:{number}: needs a known task and a better and a worse answer")
        pairs.append(pair)
    return pairs


def _scored(row: dict[str, Any], answer: dict[str, Any], database: str) -> float:
    return score(
        row["task"],
        answer["completion"],
        database=database,
        truncated=answer.get("truncated"),
        **row["context"],
    ).total


def pair_agreement(config: AuditConfig, database: str, path: Path = AUDIT_PAIRS) -> dict[str, Any]:
    """The share of pairs the rewards order as a person does (a tie is no agreement)."""
    pairs = load_pairs(path)
    agree = {
        pair["id"]: _scored(pair, pair["better"], database) > _scored(pair, pair["worse"], database)
        for pair in pairs
    }
    share = sum(agree.values()) / len(agree)
    by_task = {
        task: f"{sum(agree[p['id']] for p in pairs if p['task'] == task)}/"
        f"{sum(p['task'] == task for p in pairs)}"
        for task in TASKS
    }
    return {
        "n": len(pairs),
        "agreement": share,
        "by_task": ", ".join(f"{task} {count}" for task, count in by_task.items()),
        "passed": share >= config.min_pair_agreement,
        "worst": "; ".join(pair_id for pair_id, agreed in agree.items() if not agreed),
    }


def audit_rewards(
    config: AuditConfig,
    database: str,
    audit_set: Path = AUDIT_SET,
    pairs: Path = AUDIT_PAIRS,
) -> AuditResult:
    """Score the audit set and the pairs (SQL runs against `database`) and run the probes."""
    rows = load_audit_set(audit_set)
    per_task: dict[str, dict[str, Any]] = {}
    for task_name in TASKS:
        items = [row for row in rows if row["task"] == task_name]
        rewards = [_scored(row, row, database) for row in items]
        humans = [row["human_score"] for row in items]
        rho, p_value = spearmanr(rewards, humans)
        worst = sorted(
            zip(items, rewards, strict=True),
            key=lambda pair: -abs(pair[1] - pair[0]["human_score"]),
        )[:WORST_SHOWN]
        per_task[task_name] = {
            "n": len(items),
            "rho": float(rho),
            "p_value": float(p_value),
            "passed": bool(rho >= config.min_spearman),
            "worst": "; ".join(
                f"{item['id']}: reward {reward:.2f} vs human {item['human_score']:.2f}"
                for item, reward in worst
            ),
        }
    per_task["pairs"] = pair_agreement(config, database, pairs)
    per_task.update(run_probes(database))
    passed = all(entry["passed"] for entry in per_task.values())
    digest = hashlib.sha256(json.dumps(per_task, sort_keys=True).encode()).hexdigest()
    return AuditResult(fingerprint=digest, passed=passed, per_task=per_task)


def failure_message(result: AuditResult, config: AuditConfig) -> str:
    reasons = []
    for name, entry in result.per_task.items():
        if entry["passed"]:
            continue
        if name.startswith("probe:"):
            reasons.append(f"probe {name[6:]} failed ({entry['why']})")
        elif name == "pairs":
            reasons.append(
                f"pairs: the rewards order {entry['agreement']:.0%} of {entry['n']} pairs as a "
                f"person does < {config.min_pair_agreement:.0%} (not: {entry['worst']})"
            )
        else:
            reasons.append(
                f"{name}: Spearman rho {entry['rho']:.3f} < {config.min_spearman} "
                f"(worst: {entry['worst']})"
            )
    return "reward audit failed, nothing will be trained: " + " | ".join(reasons)


def audit_gate(config: AuditConfig) -> AuditResult:
    """Audit, publish the table, and raise AuditFailed when the gate does not pass. The SQL lines
    run against the shipped Olist database, on which the numbers their human scores judge were
    checked, whatever data the run trains on."""
    result = audit_rewards(config, str(shipped_database()))
    create_table_artifact(
        key="tucano-reward-audit",
        table=[{"check": name, **entry} for name, entry in result.per_task.items()],
        description=f"Reward audit (Spearman rho >= {config.min_spearman} per task, pairs "
        f"ordered as people do >= {config.min_pair_agreement:.0%}, probes).",
    )
    if not result.passed:
        raise AuditFailed(failure_message(result, config))
    return result


audit_gate_task = task(
    audit_gate,
    name="reward-audit",
    cache_policy=ContentKey(files=(AUDIT_SET, AUDIT_PAIRS, *sorted(SHIPPED_DATA.glob("*.csv")))),
    persist_result=True,
)
