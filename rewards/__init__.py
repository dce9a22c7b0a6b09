"""Rule-based rewards, one module per task: pure Python, no Prefect, no torch.

`score(task, completion, **context)` scores one completion; `trl_reward_functions()` gives the
batch adapters with TRL's reward signature. A row is routed by its `task` column, never by
guessing from the text (the seed's classifier scored "reengajamento" insights as pushes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rewards import extraction, insights, push, sql_qa
from rewards.common import Score, completion_text

SCORERS: dict[str, Callable[..., Score]] = {
    "extraction": extraction.score,
    "sql_qa": sql_qa.score,
    "insights": insights.score,
    "push": push.score,
}


class UnknownTaskError(KeyError):
    pass


def score(task: str, completion: Any, **context: Any) -> Score:
    try:
        scorer = SCORERS[task]
    except KeyError:
        raise UnknownTaskError(f"unknown task {task!r}; expected one of {list(SCORERS)}") from None
    return scorer(completion_text(completion), **context)


def trl_reward_function(task: str) -> Callable[..., list[float | None]]:
    """A TRL reward function for one task: None for other tasks' rows, so TRL ignores them."""
    scorer = SCORERS[task]

    def reward(
        completions: Sequence[Any], task: Sequence[str], **columns: Any
    ) -> list[float | None]:
        out: list[float | None] = []
        for index, completion in enumerate(completions):
            if task[index] != reward.task:
                out.append(None)
                continue
            context = {
                name: values[index] for name, values in columns.items() if _is_column(values)
            }
            out.append(scorer(completion_text(completion), **context).total)
        return out

    reward.task = task  # type: ignore[attr-defined]
    reward.__name__ = f"{task}_reward"
    return reward


def _is_column(values: Any) -> bool:
    return isinstance(values, list | tuple)


def trl_reward_functions() -> list[Callable[..., list[float | None]]]:
    return [trl_reward_function(task) for task in SCORERS]
