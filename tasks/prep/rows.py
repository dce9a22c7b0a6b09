"""One prompt row, the same columns for every task.

TRL hands every dataset column to every reward function, and Arrow wants one schema per dataset,
so each row carries all context columns, with None where a task has no use for one. The `task`
column routes a row to its reward; nothing is ever guessed from the text.
"""

from __future__ import annotations

from typing import Any

from rewards.context import CONTEXT_KEYS, ContextError, check_context


def prompt_row(
    *,
    prompt_id: str,
    task: str,
    system: str,
    user: str,
    reference: str,
    # What the prompt is about, so that no order or review is in both splits; no reward reads them.
    order_id: str | None = None,
    review_id: str | None = None,
    **context: Any,
) -> dict[str, Any]:
    """One prompt with its task, its reward context and a reference answer from the same data
    (tasks/prep/references.py: what SFT learns from; GRPO and evaluation never show it)."""
    try:
        check_context(context)
    except ContextError as exc:
        raise ContextError(f"prompt {prompt_id}: {exc}") from None
    row: dict[str, Any] = {
        "prompt_id": prompt_id,
        "task": task,
        "prompt": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ],
    }
    row.update(reference=reference, order_id=order_id, review_id=review_id)
    row.update({column: context.get(column) for column in CONTEXT_KEYS})
    return row


def brl(value: float) -> str:
    """Money as Brazilians write it: R$ 1.234,56."""
    text = f"{value:,.2f}".replace(",", "_").replace(".", ",").replace("_", ".")
    return f"R$ {text}"


def decimal_pt(value: float, digits: int = 1) -> str:
    """A decimal with a comma, as in Brazilian reports: 4,2."""
    return f"{value:.{digits}f}".replace(".", ",")
