"""What an answer's query computes, whether its result was written into it, and whether its
explanation says what it computes (rewards/sql_reading.py), on questions no probe asks."""

from __future__ import annotations

import pytest

from rewards import score
from rewards.sql_reading import assumes_answer, misdescribed, read_query

# Which payment type pays the most in total: one name, the gold answer.
QUESTION = "Qual forma de pagamento soma o maior valor pago?"
GOLD = (
    "SELECT payment_type FROM order_payments GROUP BY payment_type "
    "ORDER BY SUM(payment_value) DESC LIMIT 1"
)


@pytest.mark.parametrize(
    ("query", "assumed"),
    [
        (GOLD, False),
        ("SELECT 'credit_card'", True),  # reads no table
        ("SELECT 'credit_card' AS forma FROM order_payments LIMIT 1", True),  # selects a constant
        (
            "SELECT payment_type FROM order_payments WHERE payment_type = 'credit_card' LIMIT 1",
            True,
        ),  # filters on the answer
        # a literal the question names is no assumption
        ("SELECT COUNT(*) FROM order_payments WHERE payment_type = 'boleto'", False),
    ],
)
def test_a_query_that_writes_its_answer_in(query: str, assumed: bool) -> None:
    assert assumes_answer(read_query(query), [("credit_card",)], QUESTION, GOLD) is assumed


def test_an_assumed_answer_earns_no_match(prepared) -> None:
    store, manifest = prepared
    database = str(store.path(manifest.database))

    def answered(query: str) -> float:
        text = f"```sql\n{query};\n```\nA forma que soma o maior valor pago é o cartão de crédito."
        result = score("sql_qa", text, database=database, gold_sql=GOLD, question=QUESTION)
        return result.components["match"]

    assert answered(GOLD) > 0
    assert answered("SELECT 'credit_card'") == 0.0
    assert (
        answered(
            "SELECT payment_type FROM order_payments WHERE payment_type = 'credit_card' LIMIT 1"
        )
        == 0.0
    )


LATE = (
    "SELECT ROUND(100.0 * AVG(CASE WHEN o.order_delivered_customer_date > "
    "o.order_estimated_delivery_date THEN 1.0 ELSE 0.0 END), 2) FROM orders o "
    "WHERE o.order_status = 'delivered'"
)
ITEMS = "SELECT COUNT(*) FROM order_items i JOIN products p ON p.product_id = i.product_id"
AVERAGE = "SELECT ROUND(AVG(payment_value), 2) FROM order_payments WHERE payment_type = 'boleto'"
TOTAL = "SELECT ROUND(SUM(payment_value), 2) FROM order_payments WHERE payment_type = 'boleto'"
ORDERS_OF_A_STATE = (
    "SELECT COUNT(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
    "WHERE c.customer_state = 'MG'"
)


@pytest.mark.parametrize(
    ("query", "prose", "question", "wrong"),
    [
        (LATE, "8,1% dos pedidos entregues chegaram depois da data estimada.", None, []),
        (LATE, "A taxa de entrega no prazo é 8,1%.", None, ["on time"]),
        (AVERAGE, "O valor médio pago com boleto é R$ 155,13.", None, []),
        (AVERAGE, "O valor total pago com boleto é R$ 155,13.", None, ["a total"]),
        (TOTAL, "O valor médio pago com boleto é R$ 217.956,89.", None, ["an average"]),
        (ITEMS, "Foram vendidos 7377 itens.", None, []),
        (ITEMS, "Foram feitos 7377 pedidos.", None, ["orders"]),
        (ORDERS_OF_A_STATE, "Clientes de MG fizeram 748 pedidos.", None, []),
        (ORDERS_OF_A_STATE, "Clientes de MG fizeram 748 pedidos em 2017.", None, ["a year"]),
        (ORDERS_OF_A_STATE, "Clientes de RJ fizeram 748 pedidos.", None, ["a state"]),
        # the question's own state, restated: a wrong query is the match's to judge
        (
            ORDERS_OF_A_STATE,
            "Clientes de RJ fizeram 748 pedidos.",
            "Pedidos de clientes do RJ?",
            [],
        ),
        (ORDERS_OF_A_STATE, "Foram 748 pedidos entregues de MG.", None, ["delivered orders"]),
    ],
)
def test_an_explanation_is_held_to_what_its_query_computes(
    query: str, prose: str, question: str | None, wrong: list[str]
) -> None:
    assert misdescribed(prose, read_query(query), [], question) == wrong
