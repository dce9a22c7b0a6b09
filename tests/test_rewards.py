"""The seed's V4.2.1 reward rules, table-driven, with Portuguese examples."""

import pytest

from rewards import SCORERS, UnknownTaskError, score, trl_reward_function, trl_reward_functions
from rewards.extraction import normalize_pt_decimals, parse_json_object

GOOD = (
    '{"sentiment": "negativo", "sentiment_score": 1, "delivery_issue": true, '
    '"product_issue": true, "seller_issue": false, "delivered_late": true, '
    '"would_recommend": false, "churn_risk": "alto", "product_category": "moveis_decoracao", '
    '"summary": "Chegou quebrado e atrasado."}'
)

EXTRACTION = [
    # (completion, review_score, expected total)
    (GOOD, 1, 1.0),
    (f"```json\n{GOOD}\n```", 1, 1.0),
    (GOOD.replace('"negativo"', '"positivo"'), 1, 0.80),  # contradicts a 1-star review
    (GOOD.replace('"sentiment_score": 1', '"sentiment_score": true'), 1, 0.96),  # bool is not int
    # '4,5' parses (0.30), 4.5 is no integer (9/10 values), negativo on 5 stars (-0.20)
    (GOOD.replace('"sentiment_score": 1', '"sentiment_score": 4,5'), 5, 0.30 + 0.30 + 0.36 - 0.20),
    ('{"sentiment": "negativo", "sentiment_score": 1}', 1, 0.30 + 0.06 + 0.08),
    ("O cliente ficou insatisfeito.", 1, 0.0),
    ("", 1, 0.0),
]


@pytest.mark.parametrize(("completion", "review_score", "expected"), EXTRACTION)
def test_extraction(completion: str, review_score: int, expected: float) -> None:
    assert score("extraction", completion, review_score=review_score).total == pytest.approx(
        expected
    )


def test_pt_decimals_become_json_numbers_but_lists_are_left_alone() -> None:
    assert normalize_pt_decimals('{"nota": 4,5, "xs": [1,2]}') == '{"nota": 4.5, "xs": [1,2]}'
    assert parse_json_object('{"nota": 4,5}') == ({"nota": 4.5}, True)


def test_repaired_json_gets_less_than_valid_json() -> None:
    truncated = GOOD[: GOOD.index('"seller_issue"')]
    repaired = score("extraction", truncated, review_score=1)
    assert repaired.components["json"] == pytest.approx(0.20)
    assert repaired.total < score("extraction", GOOD, review_score=1).total


SQL = (
    "```sql\nSELECT COUNT(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
    "WHERE c.customer_state = 'SP';\n```"
)
SQL_CASES = [
    (SQL + "\nA consulta conta os pedidos de clientes de SP: são 2.972 pedidos no total.", 1.0),
    (SQL, 0.30 + 0.0 + 0.0 + 0.0),
    ("Os clientes de SP fizeram 2.972 pedidos, com ticket médio alto.", 0.25 + 0.20),
    ("", 0.0),
]


@pytest.mark.parametrize(("completion", "expected"), SQL_CASES)
def test_sql_tiers(completion: str, expected: float) -> None:
    assert score("sql_qa", completion).total == pytest.approx(expected)


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


def test_routing_is_by_task_column_not_text() -> None:
    reengagement = (
        "## Estratégia de reengajamento\n- Recomendo cupom para clientes inativos.\n"
        "- Priorizar o RJ.\n- Acompanhar a recompra de cada cliente."
    )
    insights_fn, push_fn = trl_reward_function("insights"), trl_reward_function("push")
    completions = [[{"role": "assistant", "content": reengagement}]] * 2
    tasks = ["insights", "push"]
    as_insights, not_push = insights_fn(completions, task=tasks)
    assert as_insights == pytest.approx(score("insights", reengagement).total)
    assert not_push is None
    assert push_fn(completions, task=tasks)[0] is None


def test_trl_adapters_cover_every_task_once() -> None:
    names = [fn.__name__ for fn in trl_reward_functions()]
    assert names == [f"{task}_reward" for task in SCORERS]


def test_unknown_task_is_an_error() -> None:
    with pytest.raises(UnknownTaskError, match="churn"):
        score("churn", "x")
