"""Rule-based rewards, one module per task: pure Python, no Prefect, no torch.

`score(task, completion, **context)` scores one completion. For TRL there are two sets of batch
adapters (`completions, **dataset_columns -> list[float | None]`, None for other tasks' rows so
TRL ignores them): one total per task, for the seed's summed reward, and one function per named
component, for GDPO (TRL's multi_objective_aggregation="normalize_then_sum" normalizes each
function within its group before summing). A row is routed by its `task` column, never by
guessing from the text (the seed's classifier scored "reengajamento" insights as pushes).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from rewards import extraction, insights, push, sql_qa
from rewards.common import SCAN_LIMIT, Score, completion_text

SCORERS: dict[str, Callable[..., Score]] = {
    "extraction": extraction.score,
    "sql_qa": sql_qa.score,
    "insights": insights.score,
    "push": push.score,
}

# Every component a task's score can report (those that need gold or a summary only when the row
# has them; a missing one counts 0).
COMPONENTS: dict[str, tuple[str, ...]] = {
    "extraction": extraction.COMPONENTS,
    "sql_qa": sql_qa.COMPONENTS,
    "insights": insights.COMPONENTS,
    "push": push.COMPONENTS,
}

RewardFunction = Callable[..., list[float | None]]


class UnknownTaskError(KeyError):
    pass


def score(task: str, completion: Any, **context: Any) -> Score:
    try:
        scorer = SCORERS[task]
    except KeyError:
        raise UnknownTaskError(f"unknown task {task!r}; expected one of {list(SCORERS)}") from None
    return scorer(completion_text(completion), **context)


@functools.lru_cache(maxsize=4096)
def _cached_score(task: str, text: str, context: tuple[tuple[str, Any], ...]) -> Score:
    # GDPO asks for each component separately; one scoring (one SQL execution) serves them all.
    return SCORERS[task](text, **dict(context))


def _batch_adapter(
    task: str, name: str, database: str | None, pick: Callable[[Score], float]
) -> RewardFunction:
    def reward(
        completions: Sequence[Any], task: Sequence[str], **columns: Any
    ) -> list[float | None]:
        out: list[float | None] = []
        for index, completion in enumerate(completions):
            if task[index] != reward.task:
                out.append(None)
                continue
            context = tuple(
                sorted(
                    (column, values[index])
                    for column, values in columns.items()
                    if isinstance(values, list | tuple) and _hashable(values[index])
                )
            )
            text = completion_text(completion)
            context = (("database", database), *context)
            # Huge texts are scored without the cache, which would otherwise keep them alive.
            cached = len(text) <= SCAN_LIMIT
            result = (
                _cached_score(reward.task, text, context)
                if cached
                else SCORERS[reward.task](text, **dict(context))
            )
            out.append(pick(result))
        return out

    reward.task = task  # type: ignore[attr-defined]
    reward.__name__ = name
    return reward


def _hashable(value: Any) -> bool:
    # Dataset columns the scorers read are plain scalars; chat prompts (lists) are not context.
    return value is None or isinstance(value, str | int | float | bool)


def trl_reward_functions(database: str | None = None) -> list[RewardFunction]:
    """One total per task (the seed's summed reward). `database`: the Olist SQLite copy."""
    return [
        _batch_adapter(task, f"{task}_reward", database, lambda result: result.total)
        for task in SCORERS
    ]


def trl_component_functions(database: str | None = None) -> list[RewardFunction]:
    """One function per (task, component), for GDPO's per-component normalisation."""
    return [
        _batch_adapter(
            task,
            f"{task}_{component}",
            database,
            lambda result, component=component: result.components.get(component, 0.0),
        )
        for task, components in COMPONENTS.items()
        for component in components
    ]
