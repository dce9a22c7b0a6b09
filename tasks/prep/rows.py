"""One prompt row, the same columns for every task.

TRL hands every dataset column to every reward function, and Arrow wants one schema per dataset,
so each row carries all context columns, with None where a task has no use for one. The `task`
column routes a row to its reward; nothing is ever guessed from the text.
"""

from __future__ import annotations

from typing import Any

CONTEXT_COLUMNS: tuple[str, ...] = (
    "order_id",
    "review_id",
    "review_text",
    "review_score",
    "gold_delivered_late",
    "gold_category",
    "question",
    "gold_sql",
    "gold_answer",
    "data_summary",
    "push_objective",
)


def prompt_row(
    *, prompt_id: str, task: str, system: str, user: str, **context: Any
) -> dict[str, Any]:
    unknown = set(context) - set(CONTEXT_COLUMNS)
    if unknown:
        raise KeyError(f"unknown context column(s) {sorted(unknown)} for {prompt_id}")
    row: dict[str, Any] = {
        "prompt_id": prompt_id,
        "task": task,
        "prompt": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ],
    }
    row.update({column: context.get(column) for column in CONTEXT_COLUMNS})
    return row


def brl(value: float) -> str:
    """Money as Brazilians write it: R$ 1.234,56."""
    text = f"{value:,.2f}".replace(",", "_").replace(".", ",").replace("_", ".")
    return f"R$ {text}"


def decimal_pt(value: float, digits: int = 1) -> str:
    """A decimal with a comma, as in Brazilian reports: 4,2."""
    return f"{value:.{digits}f}".replace(".", ",")
