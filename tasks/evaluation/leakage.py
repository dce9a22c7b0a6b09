"""Train/eval leakage: a model scored on prompts it trained on shows memory, not improvement."""

from __future__ import annotations

from typing import Any


class LeakageError(ValueError):
    """The eval split shares prompts with the train split: no comparison is meaningful."""


def leaked_prompts(train_rows: list[dict[str, Any]], eval_rows: list[dict[str, Any]]) -> list[str]:
    """Ids of the eval prompts that were trained on: the same id, the same messages, or a prompt
    about an order (its review, its customer) that a train prompt was about."""
    train_ids = {row["prompt_id"] for row in train_rows}
    train_texts = {repr(row["prompt"]) for row in train_rows}
    train_orders = {row["order_id"] for row in train_rows if row.get("order_id")}
    return [
        row["prompt_id"]
        for row in eval_rows
        if row["prompt_id"] in train_ids
        or repr(row["prompt"]) in train_texts
        or (row.get("order_id") and row["order_id"] in train_orders)
    ]


def assert_no_overlap(train_rows: list[dict[str, Any]], eval_rows: list[dict[str, Any]]) -> None:
    """Refuse to compare when an eval prompt was also trained on."""
    leaked = leaked_prompts(train_rows, eval_rows)
    if leaked:
        raise LeakageError(
            f"{len(leaked)} eval prompts are also train prompts (e.g. {leaked[:3]}); "
            "a comparison on them would measure memory, not improvement"
        )
