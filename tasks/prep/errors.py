"""Errors data prep raises for the user to act on (the command line prints them once, no trace)."""

from __future__ import annotations


class DataTooSmall(ValueError):
    """The data holds too few rows for what the recipe asks; the message names the data.* value
    to lower."""


def require(available: int, needed: int, *, side: str, task: str, what: str) -> None:
    """Raise DataTooSmall unless `available` items cover the `needed` prompts of one side."""
    if available >= needed:
        return
    lower = (
        f"data.eval_per_task.{task}"
        if side == "eval"
        else f"data.train_size (or data.task_mix.{task})"
    )
    raise DataTooSmall(
        f"the data has {available} {what} on the {side} side of the split, and {task} needs "
        f"{needed} {side} prompts: lower {lower}, or bring more data"
    )
