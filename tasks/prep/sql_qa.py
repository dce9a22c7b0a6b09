"""SQL prompts: templated business questions whose gold SQL runs on the prep's SQLite database.

Parameters (states, categories, months, payment types) come from the data itself, so every gold
answer is a real number from these tables, and a question is kept only when its answer is not
empty.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.prep.database import query
from tasks.prep.errors import require
from tasks.prep.references import sql_reference
from tasks.prep.rows import prompt_row
from tasks.prep.split import eval_side

SYSTEM = (
    "Você é um analista de dados de um marketplace brasileiro. O banco SQLite tem as tabelas "
    "orders, order_items, order_payments, order_reviews, customers, products, sellers e "
    "category_translation (colunas do dataset público da Olist). Responda com a consulta SQL "
    "entre ```sql e ```, seguida de uma explicação curta em português com o resultado esperado."
)

MONTHS_PT = (
    "janeiro", "fevereiro", "março", "abril", "maio", "junho",
    "julho", "agosto", "setembro", "outubro", "novembro", "dezembro",
)  # fmt: skip
PAYMENT_PT = {
    "credit_card": "cartão de crédito",
    "boleto": "boleto",
    "voucher": "voucher",
    "debit_card": "cartão de débito",
}

_CUSTOMER_JOIN = "JOIN customers c ON c.customer_id = o.customer_id"
_ITEM_PRODUCT_JOIN = "JOIN products p ON p.product_id = i.product_id"


@dataclass(frozen=True)
class Template:
    name: str
    question: str
    sql: str
    params: tuple[str, ...]
    # What the gold query computes, in the words its reference explains it with: the
    # aggregate, what it counts and the filters it has, nothing it does not (rewards/
    # sql_reading.py holds an explanation to its query).
    computes: str


TEMPLATES: tuple[Template, ...] = (
    Template(
        "orders_by_state",
        "Quantos pedidos foram feitos por clientes do estado {uf}?",
        f"SELECT COUNT(*) FROM orders o {_CUSTOMER_JOIN} WHERE c.customer_state = '{{uf}}'",
        ("uf",),
        "conta os pedidos de clientes de {uf}",
    ),
    Template(
        "delivered_by_state_year",
        "Quantos pedidos de clientes de {uf} comprados em {year} foram entregues?",
        f"SELECT COUNT(*) FROM orders o {_CUSTOMER_JOIN} WHERE c.customer_state = '{{uf}}' "
        "AND o.order_status = 'delivered' "
        "AND strftime('%Y', o.order_purchase_timestamp) = '{year}'",
        ("uf", "year"),
        "conta os pedidos de clientes de {uf} comprados em {year} com status entregue",
    ),
    Template(
        "late_rate_state",
        "Qual é a porcentagem de pedidos entregues com atraso para clientes de {uf}?",
        "SELECT ROUND(100.0 * AVG(CASE WHEN o.order_delivered_customer_date > "
        "o.order_estimated_delivery_date THEN 1.0 ELSE 0.0 END), 2) FROM orders o "
        f"{_CUSTOMER_JOIN} WHERE c.customer_state = '{{uf}}' AND o.order_status = 'delivered' "
        "AND o.order_delivered_customer_date IS NOT NULL",
        ("uf",),
        "calcula a porcentagem dos pedidos entregues a clientes de {uf} que chegaram depois da "
        "data estimada",
    ),
    Template(
        "avg_freight_state",
        "Qual é o valor médio do frete dos itens comprados por clientes de {uf}?",
        "SELECT ROUND(AVG(i.freight_value), 2) FROM order_items i "
        f"JOIN orders o ON o.order_id = i.order_id {_CUSTOMER_JOIN} "
        "WHERE c.customer_state = '{uf}'",
        ("uf",),
        "calcula o frete médio por item comprado por clientes de {uf}",
    ),
    Template(
        "top_cities_state",
        "Quais são as 3 cidades de {uf} com mais pedidos, e quantos pedidos cada uma teve?",
        f"SELECT c.customer_city, COUNT(*) AS pedidos FROM orders o {_CUSTOMER_JOIN} "
        "WHERE c.customer_state = '{uf}' GROUP BY c.customer_city "
        "ORDER BY pedidos DESC, c.customer_city LIMIT 3",
        ("uf",),
        "conta os pedidos por cidade de {uf}, as 3 com mais pedidos",
    ),
    Template(
        "avg_score_category",
        "Qual é a nota média das avaliações de pedidos com produtos da categoria {category}?",
        "SELECT ROUND(AVG(r.review_score), 2) FROM order_reviews r "
        f"JOIN order_items i ON i.order_id = r.order_id {_ITEM_PRODUCT_JOIN} "
        "WHERE p.product_category_name = '{category}'",
        ("category",),
        "calcula a nota média das avaliações de pedidos com itens da categoria {category}",
    ),
    Template(
        "avg_price_category",
        "Qual é o preço médio dos itens vendidos na categoria {category}?",
        f"SELECT ROUND(AVG(i.price), 2) FROM order_items i {_ITEM_PRODUCT_JOIN} "
        "WHERE p.product_category_name = '{category}'",
        ("category",),
        "calcula o preço médio dos itens vendidos na categoria {category}",
    ),
    Template(
        "items_category_state",
        "Quantos itens da categoria {category} foram vendidos para clientes de {uf}?",
        f"SELECT COUNT(*) FROM order_items i {_ITEM_PRODUCT_JOIN} "
        f"JOIN orders o ON o.order_id = i.order_id {_CUSTOMER_JOIN} "
        "WHERE p.product_category_name = '{category}' AND c.customer_state = '{uf}'",
        ("category", "uf"),
        "conta os itens da categoria {category} vendidos para clientes de {uf}",
    ),
    Template(
        "delivery_days_category",
        "Quantos dias, em média, os pedidos da categoria {category} levaram da compra até a "
        "entrega?",
        "SELECT ROUND(AVG(julianday(o.order_delivered_customer_date) - "
        "julianday(o.order_purchase_timestamp)), 1) FROM orders o "
        f"JOIN order_items i ON i.order_id = o.order_id {_ITEM_PRODUCT_JOIN} "
        "WHERE p.product_category_name = '{category}' "
        "AND o.order_delivered_customer_date IS NOT NULL",
        ("category",),
        "calcula a média de dias até a entrega dos pedidos entregues de {category}",
    ),
    Template(
        "orders_in_month",
        "Quantos pedidos foram feitos em {month_pt} de {year}?",
        "SELECT COUNT(*) FROM orders o WHERE strftime('%Y-%m', o.order_purchase_timestamp) = "
        "'{year}-{month}'",
        ("year_month",),
        "conta os pedidos feitos em {month_pt} de {year}",
    ),
    Template(
        "revenue_month",
        "Qual foi a receita total (soma dos preços dos itens) em {month_pt} de {year}?",
        "SELECT ROUND(SUM(i.price), 2) FROM order_items i JOIN orders o ON o.order_id = i.order_id "
        "WHERE strftime('%Y-%m', o.order_purchase_timestamp) = '{year}-{month}'",
        ("year_month",),
        "soma os preços dos itens vendidos em {month_pt} de {year}",
    ),
    Template(
        "payment_total_state",
        "Qual é o valor total pago com {payment_pt} por clientes de {uf}?",
        "SELECT ROUND(SUM(pay.payment_value), 2) FROM order_payments pay "
        f"JOIN orders o ON o.order_id = pay.order_id {_CUSTOMER_JOIN} "
        "WHERE pay.payment_type = '{payment}' AND c.customer_state = '{uf}'",
        ("payment", "uf"),
        "soma o valor pago com {payment_pt} por clientes de {uf}",
    ),
    Template(
        "top_categories_year",
        "Quais são as 3 categorias com mais itens vendidos em {year}?",
        "SELECT p.product_category_name, COUNT(*) AS itens "
        f"FROM order_items i {_ITEM_PRODUCT_JOIN} "
        "JOIN orders o ON o.order_id = i.order_id "
        "WHERE strftime('%Y', o.order_purchase_timestamp) = '{year}' "
        "AND p.product_category_name IS NOT NULL "
        "GROUP BY p.product_category_name ORDER BY itens DESC, p.product_category_name LIMIT 3",
        ("year",),
        "conta os itens por categoria em {year}, as 3 maiores",
    ),
)


def parameter_space(database: Path) -> dict[str, list[Any]]:
    """The values each template parameter can take, read from the data."""

    def column(sql: str) -> list[Any]:
        return [row[0] for row in query(database, sql)]

    return {
        "uf": column("SELECT DISTINCT customer_state FROM customers ORDER BY 1"),
        "year": column(
            "SELECT DISTINCT strftime('%Y', order_purchase_timestamp) FROM orders ORDER BY 1"
        ),
        "year_month": column(
            "SELECT DISTINCT strftime('%Y-%m', order_purchase_timestamp) FROM orders ORDER BY 1"
        ),
        # Categories with enough sales that their averages mean something.
        "category": column(
            "SELECT p.product_category_name FROM order_items i JOIN products p "
            "ON p.product_id = i.product_id WHERE p.product_category_name IS NOT NULL "
            "GROUP BY 1 HAVING COUNT(*) >= 10 ORDER BY 1"
        ),
        "payment": column("SELECT DISTINCT payment_type FROM order_payments ORDER BY 1"),
    }


def _bind(template: Template, space: dict[str, list[Any]], rng: random.Random) -> dict[str, str]:
    values: dict[str, str] = {}
    for param in template.params:
        choice = rng.choice(space[param])
        if param == "year_month":
            values["year"], values["month"] = choice.split("-")
            values["month_pt"] = MONTHS_PT[int(values["month"]) - 1]
        elif param == "payment":
            values["payment"], values["payment_pt"] = choice, PAYMENT_PT.get(choice, choice)
        else:
            values[param] = choice
    return values


def sql_prompts(
    database: Path, train_count: int, eval_count: int, eval_share: float, rng: random.Random
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, eval): distinct questions, templates drawn uniformly, parameters from the data; a
    question's side of the split is fixed by its text (tasks/prep/split.py)."""
    space = parameter_space(database)
    wanted = {"train": train_count, "eval": eval_count}
    sides: dict[str, dict[str, dict[str, Any]]] = {"train": {}, "eval": {}}
    attempts = 0
    while any(len(sides[side]) < wanted[side] for side in sides):
        attempts += 1
        if attempts > (train_count + eval_count) * 50:
            for name, drawn in sides.items():
                require(
                    len(drawn), wanted[name], side=name, task="sql_qa",
                    what="distinct SQL questions with a non-empty answer (as drawn)",
                )  # fmt: skip
        template = rng.choice(TEMPLATES)
        values = _bind(template, space, rng)
        question = template.question.format(**values)
        side = "eval" if eval_side(question, eval_share) else "train"
        if question in sides[side] or len(sides[side]) >= wanted[side]:
            continue
        # Parameters come from the data; doubling quotes keeps a value like "d'oeste" a literal.
        gold_sql = template.sql.format(**{k: v.replace("'", "''") for k, v in values.items()})
        answer = query(database, gold_sql)
        if not answer or all(cell is None for row in answer for cell in row):
            continue
        digest = hashlib.sha256(question.encode()).hexdigest()[:16]
        sides[side][question] = prompt_row(
            prompt_id=f"sql_qa-{digest}",
            task="sql_qa",
            system=SYSTEM,
            user=question,
            reference=sql_reference(gold_sql, template.computes.format(**values), answer),
            question=question,
            gold_sql=gold_sql,
            gold_answer=json.dumps(answer, ensure_ascii=False),
        )
    return list(sides["train"].values()), list(sides["eval"].values())
