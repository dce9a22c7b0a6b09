"""Insights prompts: a data summary computed from the tables -> a strategic analysis.

Each summary is one slice of the data (a year, a state, a category) grouped one way (by state,
category, month, city, seller's state or payment type), written as a small table with numbers in
Brazilian notation. The summary text is kept as the row's context, so a reward can hold what an
answer claims of the table to it, and so is the focus the prompt asks for.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache, partial
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
# What the analysis is asked to focus on, by the name its reference is written for; the order
# numbers the prompt ids.
FOCUSES: dict[str, str] = {
    "problems": "Identifique os principais problemas e recomende ações prioritárias.",
    "logistics": "Foque em logística: prazos, atrasos e frete.",
    "retention": (
        "Proponha uma estratégia de reengajamento e retenção de clientes com base nesses dados."
    ),
    "marketing": "Indique onde investir em marketing e sortimento no próximo trimestre.",
    "satisfaction": "Analise a satisfação dos clientes e o que fazer para melhorá-la.",
}
ROWS_PER_SUMMARY = 6
# A group with fewer orders than this gives rates that are noise, not information.
MIN_ORDERS_PER_GROUP = 5
MIN_GROUPS_PER_SUMMARY = 3
PAYMENTS_PT = {
    "credit_card": "cartão de crédito",
    "boleto": "boleto",
    "voucher": "voucher",
    "debit_card": "cartão de débito",
}


def _metrics(orders: pd.DataFrame, by: str) -> pd.DataFrame:
    grouped = orders.groupby(by)
    table = pd.DataFrame(
        {
            "pedidos": grouped.size(),
            "ticket": grouped["items_value"].mean(),
            "frete": grouped["freight_value"].mean(),
            # Orders not delivered yet have no lateness: the mean skips them.
            "atraso": orders["delivered_late"].astype(float).groupby(orders[by]).mean(),
            "nota": grouped["review_score"].mean(),
        }
    )
    table = table[table["pedidos"] >= MIN_ORDERS_PER_GROUP]
    return table.sort_values(["pedidos"], ascending=False, kind="stable").head(ROWS_PER_SUMMARY)


def _format_table(table: pd.DataFrame, label: str) -> str:
    def cell(value: float, fmt: Callable[[float], str]) -> str:
        return "—" if pd.isna(value) else fmt(value)

    lines = [
        f"| {label} | pedidos | ticket médio | frete médio | atraso | nota média |",
        "|---|---|---|---|---|---|",
    ]
    for key, row in table.iterrows():
        lines.append(
            f"| {key} | {int(row['pedidos'])} | {cell(row['ticket'], brl)} | "
            f"{cell(row['frete'], brl)} | "
            f"{cell(row['atraso'], lambda v: decimal_pt(100 * v) + '%')} | "
            f"{cell(row['nota'], decimal_pt)} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class Slice:
    """One data summary: its text, and the table and label its references are written from."""

    text: str
    table: pd.DataFrame
    label: str


def _summary(title: str, orders: pd.DataFrame, by: str, label: str) -> Slice:
    """The slice's orders that have a `by`, grouped by it (`_summarisable` holds for them)."""
    orders = orders.dropna(subset=[by])
    table = _metrics(orders, by)
    start, end = orders["order_purchase_timestamp"].min(), orders["order_purchase_timestamp"].max()
    text = (
        f"Resumo de dados: {title}\n"
        f"Período: {start:%m/%Y} a {end:%m/%Y}; {len(orders)} pedidos\n\n"
        f"{_format_table(table, label)}"
    )
    return Slice(text, table, label)


# The ways a summary groups its slice's orders: (key prefix, title, column, label).
GROUPINGS = {
    "states": ("estados", "customer_state", "estado"),
    "categories": ("categorias", "category", "categoria"),
    "months": ("evolução mensal", "mes", "mês"),
    "cities": ("cidades", "customer_city", "cidade"),
    "sellers": ("estados dos vendedores", "seller_state", "estado do vendedor"),
    "payments": ("formas de pagamento", "pagamento", "pagamento"),
}
# Which groupings each kind of slice is summarised by: a state's categories, a category's
# months, a year's payment types, ...
SLICE_GROUPINGS = {
    "year": ("states", "categories", "sellers", "payments"),
    "state": ("categories", "months", "cities", "sellers", "payments"),
    "category": ("states", "months", "sellers", "payments"),
}


# The slices the first preps had keep their keys, so they stay on their side of the split.
FIRST_KEYS = {
    "year-states": "year",
    "state-categories": "state",
    "state-months": "months",
    "category-states": "category",
}


def _summarisable(orders: pd.DataFrame, by: str) -> bool:
    """Whether `_summary` gives a table, told from the group sizes alone."""
    sizes = orders[by].value_counts()
    return int((sizes >= MIN_ORDERS_PER_GROUP).sum()) >= MIN_GROUPS_PER_SUMMARY


# A slice's summary, computed on first call and kept.
Summary = Callable[[], Slice]


def _slices(orders: pd.DataFrame) -> Iterator[tuple[str, Summary]]:
    """(slice key, its summary still to compute) for every slice of the data and every way it is
    grouped that gives a summary. A prep asks for a few of some 400 summaries, and computing one
    costs milliseconds where telling whether it exists costs a tenth of that."""
    orders = orders.assign(
        mes=orders["order_purchase_timestamp"].dt.strftime("%Y-%m"),
        pagamento=orders["payment_type"].map(lambda kind: PAYMENTS_PT.get(kind, kind)),
    )
    slices = {
        "year": (
            (str(year), f"em {year}", group)
            for year, group in orders.groupby(orders["order_purchase_timestamp"].dt.year)
        ),
        "state": ((uf, f"em {uf}", group) for uf, group in orders.groupby("customer_state")),
        "category": (
            (category, f"na categoria {category}", group)
            for category, group in orders[orders["category"] != ""].groupby("category")
        ),
    }
    for kind, groups in slices.items():
        for name, where, group in groups:
            for grouping in SLICE_GROUPINGS[kind]:
                title, column, label = GROUPINGS[grouping]
                if not _summarisable(group, column):
                    continue
                key = f"{kind}-{grouping}"
                yield (
                    f"{FIRST_KEYS.get(key, key)}:{name}",
                    cache(partial(_summary, f"{title} {where}", group, column, label)),
                )


def insights_prompts(
    orders: pd.DataFrame, train_count: int, eval_count: int, eval_share: float, rng: random.Random
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Train and eval prompts drawn from disjoint slices, so no summary is in both splits; a
    slice's side of the split is fixed by its key (tasks/prep/split.py). `orders` is the order
    view with each order's seller state and payment type (tasks/prep/orders.py). Each summary is
    asked with one focus before any is asked with a second, so a split holds as many distinct
    summaries as it has prompts, where the data has them."""
    slices = list(_slices(orders))
    rng.shuffle(slices)
    eval_slices, train_slices = partition(slices, lambda item: item[0], eval_share)
    focuses = list(FOCUSES)

    def pool(sliced: list[tuple[str, Summary]]) -> list[tuple[str, Summary, str]]:
        """Every (slice, focus), each slice's focuses in a drawn order, slices taken round by
        round: the first len(sliced) prompts are distinct summaries."""
        orders_of = {key: rng.sample(focuses, len(focuses)) for key, _ in sliced}
        return [
            (key, summary, orders_of[key][round_])
            for round_ in range(len(focuses))
            for key, summary in sliced
        ]

    eval_pool, train_pool = pool(eval_slices), pool(train_slices)
    for side, drawn, needed in (
        ("eval", eval_pool, eval_count),
        ("train", train_pool, train_count),
    ):
        what = f"insights prompts ({len(FOCUSES)} per data summary)"
        require(len(drawn), needed, side=side, task="insights", what=what)

    def row(key: str, summarise: Summary, focus: str) -> dict[str, Any]:
        summary = summarise()
        return prompt_row(
            prompt_id=f"insights-{key}-{focuses.index(focus)}",
            task="insights",
            system=SYSTEM,
            user=f"{summary.text}\n\nTarefa: {FOCUSES[focus]}",
            reference=insights_reference(summary.table, summary.label, focus),
            data_summary=summary.text,
            analysis_focus=FOCUSES[focus],
        )

    return [row(*c) for c in train_pool[:train_count]], [row(*c) for c in eval_pool[:eval_count]]
