"""The seed's V4.2.1 reward rules, table-driven, with Portuguese examples."""

import pytest

from rewards import (
    COMPONENTS,
    READS,
    SCORERS,
    UnknownTaskError,
    score,
    trl_component_functions,
    trl_reward_functions,
)
from rewards.classify import classify
from rewards.context import CONTEXT_KEYS, ContextError
from rewards.extraction import normalize_pt_decimals, parse_json_object
from tasks.evaluation.audit import load_audit_set
from tasks.prep.rows import prompt_row

GOOD = (
    '{"sentiment": "negativo", "sentiment_score": 1, "delivery_issue": true, '
    '"product_issue": true, "seller_issue": false, "delivered_late": true, '
    '"would_recommend": false, "churn_risk": "alto", "product_category": "moveis_decoracao", '
    '"summary": "Chegou quebrado e atrasado."}'
)

# With a review score in the row, 0.30 goes to gold correctness and the seed's parts share 0.70.
EXTRACTION = [
    # (completion, review_score, expected total)
    (GOOD, 1, 1.0),
    (f"```json\n{GOOD}\n```", 1, 1.0),
    (GOOD.replace('"negativo"', '"positivo"'), 1, 0.70 + 0.30 - 0.20),  # contradicts 1 star
    # a boolean is not the integer score: 9/10 values, and the gold score check fails
    (GOOD.replace('"sentiment_score": 1', '"sentiment_score": true'), 1, 0.70 * 0.96),
    # '4,5' parses; 4.5 is no integer and not the gold 5; negativo on 5 stars
    (GOOD.replace('"sentiment_score": 1', '"sentiment_score": 4,5'), 5, 0.70 * 0.96 - 0.20),
    ('{"sentiment": "negativo", "sentiment_score": 1}', 1, 0.70 * (0.30 + 0.06 + 0.08) + 0.30),
    (GOOD, None, 1.0),  # no gold at all: the seed's weights
    ("O cliente ficou insatisfeito.", 1, 0.0),
    ("", 1, 0.0),
]


@pytest.mark.parametrize(("completion", "review_score", "expected"), EXTRACTION)
def test_extraction(completion: str, review_score: int | None, expected: float) -> None:
    assert score("extraction", completion, review_score=review_score).total == pytest.approx(
        expected
    )


def test_pt_decimals_become_json_numbers_but_lists_are_left_alone() -> None:
    assert normalize_pt_decimals('{"nota": 4,5, "xs": [1,2]}') == '{"nota": 4.5, "xs": [1,2]}'
    assert parse_json_object('{"nota": 4,5}') == ({"nota": 4.5}, True)


@pytest.mark.parametrize(
    ("late", "category", "expected"),
    [
        (True, "moveis_decoracao", 1.0),
        (True, "Móveis decoração", 1.0),  # folded: accents, case and spaces don't matter
        (False, "moveis_decoracao", 0.70 + 0.30 * 2 / 3),
        (True, "cama_mesa_banho", 0.70 + 0.30 * 2 / 3),
    ],
)
def test_extraction_gold_fields_count(late: bool, category: str, expected: float) -> None:
    result = score(
        "extraction", GOOD, review_score=1, gold_delivered_late=late, gold_category=category
    )
    assert result.total == pytest.approx(expected)


def test_repaired_json_gets_less_than_valid_json() -> None:
    truncated = GOOD[: GOOD.index('"seller_issue"')]
    repaired = score("extraction", truncated)
    assert repaired.components["json"] == pytest.approx(0.20)
    assert repaired.total < score("extraction", GOOD, review_score=1).total


SQL = (
    "```sql\nSELECT COUNT(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
    "WHERE c.customer_state = 'SP';\n```"
)
GOLD_SQL = (
    "SELECT COUNT(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
    "WHERE c.customer_state = 'SP'"
)
EXPLANATION = "\nA consulta conta os pedidos de clientes de SP: são 2.972 pedidos no total."
SQL_CASES = [
    # match 0.40 + runs 0.10 + structure 0.15 + explanation 0.15 + numbers 0.10 + domain 0.10
    (SQL + EXPLANATION, 1.0),
    (SQL, 0.40 + 0.10 + 0.15),
    (SQL.replace("'SP'", "'RJ'") + EXPLANATION, 1.0 - 0.40),  # runs, answers another question
    # the gold count among extra columns: half the match credit
    (SQL.replace("COUNT(*)", "c.customer_state, COUNT(*)") + EXPLANATION, 1.0 - 0.20),
    (SQL.replace("SELECT", "SELEC") + EXPLANATION, 0.15 + 0.10 + 0.10),  # does not run
    ("Os clientes de SP fizeram 2.972 pedidos, com ticket médio alto.", 0.10 + 0.10),
    ("```sql\nDROP TABLE orders;\n```" + EXPLANATION, 0.0),  # hostile: nothing at all
    ("", 0.0),
]


@pytest.mark.parametrize(("completion", "expected"), SQL_CASES)
def test_sql_tiers_with_execution(prepared, completion: str, expected: float) -> None:
    store, manifest = prepared
    database = store.path(manifest.database)
    result = score("sql_qa", completion, database=database, gold_sql=GOLD_SQL)
    assert result.total == pytest.approx(expected)


def test_sql_without_a_database_gets_no_execution_credit() -> None:
    result = score("sql_qa", SQL + EXPLANATION, gold_sql=GOLD_SQL)
    assert result.total == pytest.approx(0.50)
    assert result.components["match"] == result.components["runs"] == 0.0


def test_sql_gold_answer_column_is_used_when_present(prepared) -> None:
    store, manifest = prepared
    database = store.path(manifest.database)
    wrong_gold = score("sql_qa", SQL, database=database, gold_answer="[[1]]")
    assert wrong_gold.components["match"] == 0.0


ANALYSIS = (
    "## Diagnóstico\n- RJ tem atraso de 14,8% e nota 3,6.\n\n## Recomendações\n"
    "1. Priorizar a logística no RJ e revisar transportadoras.\n2. Monitorar o atraso por estado.\n"
    "3. Investir em recompra em SP, onde o cliente está satisfeito."
)
INSIGHTS_CASES = [
    (ANALYSIS, 1.0),
    ("Vendas boas.", 0.3 * 12 / 100 + 0.10),  # 12 of 100 characters, one domain word
    ("O e-commerce cresce muito. " * 100, 0.0),  # 2,700 characters of nothing
    ("", 0.0),
]


@pytest.mark.parametrize(("completion", "expected"), INSIGHTS_CASES)
def test_insights(completion: str, expected: float) -> None:
    assert score("insights", completion).total == pytest.approx(expected, abs=0.02)


SUMMARY = (
    "| estado | pedidos | ticket médio | atraso | nota média |\n|---|---|---|---|---|\n"
    "| SP | 1210 | R$ 118,20 | 4,1% | 4,2 |\n| RJ | 410 | R$ 131,50 | 14,8% | 3,6 |"
)


@pytest.mark.parametrize(
    ("claim", "grounding"),
    [
        ("RJ tem atraso de 14,8% e nota 3,6; SP tem 1.210 pedidos.", 0.20),  # three found
        ("RJ has a 14.8% delay.", 0.20 / 3),  # English notation is read too
        ("RJ tem atraso de 37% e nota 2,1.", -0.15),  # invented
        ("RJ tem atraso de 14,8% e nota 2,1.", 0.20 / 3 - 0.15 / 2),
        ("Sem números aqui.", 0.0),
    ],
)
def test_insights_grounding(claim: str, grounding: float) -> None:
    text = f"## Análise\n- {claim}\n\n## Ações\n1. Recomendo priorizar o RJ."
    result = score("insights", text, data_summary=SUMMARY)
    assert result.components["grounding"] == pytest.approx(grounding)


def test_list_markers_are_not_cited_numbers() -> None:
    text = "1. Priorizar o RJ.\n2. Revisar prazos.\n3. Monitorar."
    assert score("insights", text, data_summary=SUMMARY).components["grounding"] == 0.0


PUSH_CASES = [
    ("Seu jogo de cama chegou? Conta pra gente o que achou e ganhe 10% na próxima compra! ⭐", 1.0),
    ("Prezado cliente, seu pedido foi entregue. Atenciosamente, Equipe.", None),
    ("Olá! " + "Aproveite as novidades da loja para você. " * 8, None),
    ("", 0.0),
]


@pytest.mark.parametrize(("completion", "expected"), PUSH_CASES)
def test_push(completion: str, expected: float | None) -> None:
    result = score("push", completion)
    if expected is not None:
        assert result.total == pytest.approx(expected)
    if "Prezado" in completion:
        assert result.components["formal"] == pytest.approx(-0.20)
    if len(completion) >= 200:
        assert result.components["length"] == 0.0


def _by_name(functions):
    return {fn.__name__: fn for fn in functions}


def test_routing_is_by_task_column_not_text() -> None:
    reengagement = (
        "## Estratégia de reengajamento\n- Recomendo cupom para clientes inativos.\n"
        "- Priorizar o RJ.\n- Acompanhar a recompra de cada cliente."
    )
    functions = _by_name(trl_reward_functions())
    completions = [[{"role": "assistant", "content": reengagement}]] * 2
    tasks = ["insights", "push"]
    as_insights, not_push = functions["insights_reward"](completions, task=tasks)
    assert as_insights == pytest.approx(score("insights", reengagement).total)
    assert not_push is None
    assert functions["push_reward"](completions, task=tasks)[0] is None


def test_trl_adapters_cover_every_task_once() -> None:
    names = [fn.__name__ for fn in trl_reward_functions()]
    assert names == [f"{task}_reward" for task in SCORERS]


def test_components_are_declared_and_gdpo_functions_add_up_to_the_total() -> None:
    component_functions = trl_component_functions()
    assert len(component_functions) == sum(len(c) for c in COMPONENTS.values())
    for row in load_audit_set():
        result = score(row["task"], row["completion"], **row["context"])
        assert set(result.components) <= set(COMPONENTS[row["task"]]), row["id"]
        columns = {key: [value] for key, value in row["context"].items()}
        parts = [
            fn([row["completion"]], task=[row["task"]], **columns)[0] for fn in component_functions
        ]
        summed = sum(p for p in parts if p is not None)
        assert min(1.0, max(0.0, summed)) == pytest.approx(result.total), row["id"]


@pytest.mark.parametrize(
    ("text", "task"),
    [
        (GOOD, "extraction"),
        (SQL + EXPLANATION, "sql_qa"),
        ("Seu pedido chegou! Conta pra gente o que achou 💙", "push"),
        # the seed's bug: an analysis about re-engagement and notifications is not a push
        (
            "## Estratégia de reengajamento\n- Enviar notificação push para clientes inativos.\n"
            "- Recomendo cupom de reengajamento.",
            "insights",
        ),
        ("Reengajamento: " + "analisar a base de clientes inativos e priorizar. " * 6, "insights"),
        ('{"foo": 1, "bar": 2}', "push"),  # some other JSON, short: not an extraction
    ],
)
def test_classifier_for_untyped_input(text: str, task: str) -> None:
    assert classify(text) == task


def test_unknown_task_is_an_error() -> None:
    with pytest.raises(UnknownTaskError, match="churn"):
        score("churn", "x")


def test_every_scorer_reads_only_words_of_the_context_vocabulary() -> None:
    for task, reads in READS.items():
        assert reads <= {*CONTEXT_KEYS, "database"}, task


@pytest.mark.parametrize(
    ("context", "error"),
    [
        ({"review_scor": 1}, "unknown context key 'review_scor'"),  # would have scored 0
        ({"review_score": "5"}, "'review_score' must be int"),
        ({"review_score": True}, "'review_score' must be int"),
        ({"gold_delivered_late": 1}, "'gold_delivered_late' must be bool"),
    ],
)
def test_a_misspelled_or_mistyped_context_key_is_an_error_everywhere(
    context: dict, error: str
) -> None:
    with pytest.raises(ContextError, match=error):
        score("extraction", GOOD, **context)
    reward = _by_name(trl_reward_functions())["extraction_reward"]
    columns = {key: [value] for key, value in context.items() if key in CONTEXT_KEYS}
    if columns:  # a dataset column outside the vocabulary is no context (prompt_id, order_id)
        with pytest.raises(ContextError, match=error):
            reward([GOOD], task=["extraction"], **columns)
    with pytest.raises(ContextError, match=error):
        prompt_row(prompt_id="p", task="extraction", system="s", user="u", reference="r", **context)


def test_context_a_task_does_not_read_is_ignored() -> None:
    assert score("push", "Seu pedido chegou!", data_summary="x", review_score=5) == score(
        "push", "Seu pedido chegou!"
    )
