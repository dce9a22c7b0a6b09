"""Insights prompts: a data summary computed from the tables -> a strategic analysis.

Each summary is one slice of the data (a state's categories, a category's states, a state's
months, a state's payment mix, a year's states), written as a small table with numbers in
Brazilian notation. The summary text is kept as the row's context, so a reward can check which
numbers an answer cites.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from tasks.prep.errors import require
from tasks.prep.references import insights_reference
from tasks.prep.rows import brl, decimal_pt, prompt_row
from tasks.prep.split import partition

SYSTEM = (
    "Você é um consultor de estratégia de e-commerce no Brasil. A partir do resumo de dados, "
    "escreva uma análise estratégica em português: destaque o que os números mostram e dê "
    "recomendações concretas e priorizadas. Use só os números do resumo."
)
FOCUSES = (
    "Identifique os principais problemas e recomende ações prioritárias.",
    "Foque em logística: prazos, atrasos e frete.",
    "Proponha uma estratégia de reengajamento e retenção de clientes com base nesses dados.",
    "Indique onde investir em marketing e sortimento no próximo trimestre.",
    "Analise a satisfação dos clientes e o que fazer para melhorá-la.",
)
ROWS_PER_SUMMARY = 6
# A group with fewer orders than this gives rates that are noise, not information.
MIN_ORDERS_PER_GROUP = 5
MIN_GROUPS_PER_SUMMARY = 3


def _metrics(orders: pd.DataFrame, by: str) -> pd.DataFrame:
    grouped = orders.groupby(by)
    table = pd.DataFrame(
        {
            "pedidos": grouped.size(),
            "ticket": grouped["items_value"].mean(),
            "atraso": grouped["delivered_late"].apply(lambda s: s.dropna().astype(float).mean()),
            "nota": grouped["review_score"].mean(),
        }
    )
    table = table[table["pedidos"] >= MIN_ORDERS_PER_GROUP]
    return table.sort_values(["pedidos"], ascending=False, kind="stable").head(ROWS_PER_SUMMARY)


def _format_table(table: pd.DataFrame, label: str) -> str:
    def cell(value: float, fmt: Callable[[float], str]) -> str:
        return "—" if pd.isna(value) else fmt(value)

    lines = [f"| {label} | pedidos | ticket médio | atraso | nota média |", "|---|---|---|---|---|"]
    for key, row in table.iterrows():
        lines.append(
            f"| {key} | {int(row['pedidos'])} | {cell(row['ticket'], brl)} | "
            f"{cell(row['atraso'], lambda v: decimal_pt(100 * v) + '%')} | "
            f"{cell(row['nota'], decimal_pt)} |"
        )
    return "\n".join(lines)


def _summary(title: str, orders: pd.DataFrame, by: str, label: str) -> tuple[str, str] | None:
    """The summary text of one slice, and a reference analysis of it."""
    table = _metrics(orders, by)
    if len(table) < MIN_GROUPS_PER_SUMMARY:
        return None
    start, end = orders["order_purchase_timestamp"].min(), orders["order_purchase_timestamp"].max()
    text = (
        f"Resumo de dados: {title}\n"
        f"Período: {start:%m/%Y} a {end:%m/%Y}; {len(orders)} pedidos\n\n"
        f"{_format_table(table, label)}"
    )
    return text, insights_reference(table, label)


def _slices(orders: pd.DataFrame) -> Iterator[tuple[str, tuple[str, str] | None]]:
    """(slice key, (summary text, reference analysis)) for every slice of the data."""
    months = orders.assign(mes=orders["order_purchase_timestamp"].dt.strftime("%Y-%m"))
    for year, group in orders.groupby(orders["order_purchase_timestamp"].dt.year):
        yield f"year:{year}", _summary(f"estados em {year}", group, "customer_state", "estado")
    for uf, group in orders.groupby("customer_state"):
        yield f"state:{uf}", _summary(f"categorias em {uf}", group, "category", "categoria")
        yield (
            f"months:{uf}",
            _summary(
                f"evolução mensal em {uf}", months[months["customer_state"] == uf], "mes", "mês"
            ),
        )
    for category, group in orders[orders["category"] != ""].groupby("category"):
        yield (
            f"category:{category}",
            _summary(f"estados na categoria {category}", group, "customer_state", "estado"),
        )


def insights_prompts(
    orders: pd.DataFrame, train_count: int, eval_count: int, eval_share: float, rng: random.Random
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train and eval prompts drawn from disjoint slices, so no summary is in both splits; a
    slice's side of the split is fixed by its key (tasks/prep/split.py)."""
    slices = [(key, summary) for key, summary in _slices(orders) if summary is not None]
    rng.shuffle(slices)
    eval_slices, train_slices = partition(slices, lambda item: item[0], eval_share)
    # As few eval slices as cover the eval count, so the eval split spans distinct summaries.
    eval_slices = eval_slices[: -(-eval_count // len(FOCUSES))]
    eval_pool = [(key, summary, focus) for key, summary in eval_slices for focus in FOCUSES]
    train_pool = [(key, summary, focus) for key, summary in train_slices for focus in FOCUSES]
    rng.shuffle(eval_pool)
    rng.shuffle(train_pool)
    for side, pool, needed in (("eval", eval_pool, eval_count), ("train", train_pool, train_count)):
        what = f"insights prompts ({len(FOCUSES)} per data summary)"
        require(len(pool), needed, side=side, task="insights", what=what)

    def row(key: str, summary: tuple[str, str], focus: str) -> dict[str, Any]:
        text, reference = summary
        return prompt_row(
            prompt_id=f"insights-{key}-{FOCUSES.index(focus)}",
            task="insights",
            system=SYSTEM,
            user=f"{text}\n\nTarefa: {focus}",
            reference=reference,
            data_summary=text,
        )

    return [row(*c) for c in train_pool[:train_count]], [row(*c) for c in eval_pool[:eval_count]]
