"""Rule-based rewards, one module per task: pure Python, no Prefect, no torch.

`score(task, completion, database=..., **context)` scores one completion; the context keys are
the typed vocabulary of rewards/context.py, and each scorer gets those its parameters name. For
TRL there are two sets of batch adapters (`completions, **dataset_columns -> list[float | None]`,
None for other tasks' rows so TRL ignores them): one total per task, for the seed's summed
reward, and one function per named component, for GDPO (TRL's
multi_objective_aggregation="normalize_then_sum" normalizes each function within its group
before summing). A row is routed by its `task` column, never by guessing from the text (the
seed's classifier scored "reengajamento" insights as pushes).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from rewards import extraction, insights, push, sql_qa
from rewards.common import SCAN_LIMIT, Score, completion_text
from rewards.context import CONTEXT_KEYS, RewardContext, check_context

# The product's tasks, in report order: every other list of tasks is this one.
SCORERS: dict[str, Callable[..., Score]] = {
    "extraction": extraction.score,
    "sql_qa": sql_qa.score,
    "insights": insights.score,
    "push": push.score,
}
TASKS: tuple[str, ...] = tuple(SCORERS)
# What each scorer reads: its parameters after the completion (context keys; SQL's database).
READS: dict[str, frozenset[str]] = {
    task: frozenset(list(inspect.signature(scorer).parameters)[1:])
    for task, scorer in SCORERS.items()
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


def score(task: str, completion: Any, database: str | None = None, **context: Any) -> Score:
    if task not in SCORERS:
        raise UnknownTaskError(f"unknown task {task!r}; expected one of {list(SCORERS)}")
    return _run(task, completion_text(completion), database, check_context(context))


def _run(task: str, text: str, database: str | None, context: RewardContext) -> Score:
    reads = READS[task]
    arguments: dict[str, Any] = {key: value for key, value in context.items() if key in reads}
    if "database" in reads:
        arguments["database"] = database
    return SCORERS[task](text, **arguments)


@functools.lru_cache(maxsize=4096)
def _cached_run(
    task: str, text: str, database: str | None, context: tuple[tuple[str, Any], ...]
) -> Score:
    # GDPO asks for each component separately; one scoring (one SQL execution) serves them all.
    return _run(task, text, database, dict(context))  # type: ignore[arg-type]


def _batch_adapter(
    task: str, name: str, database: str | None, pick: Callable[[Score], float]
) -> RewardFunction:
    def reward(
        completions: Sequence[Any], task: Sequence[str], **columns: Any
    ) -> list[float | None]:
        # TRL hands over every dataset column (and some of its own): the context is the
        # vocabulary's columns, checked like any other context.
        present = [key for key in CONTEXT_KEYS if key in columns]
        out: list[float | None] = []
        for index, completion in enumerate(completions):
            if task[index] != reward.task:
                out.append(None)
                continue
            context = check_context({key: columns[key][index] for key in present})
            text = completion_text(completion)
            # Huge texts are scored without the cache, which would otherwise keep them alive.
            result = (
                _cached_run(reward.task, text, database, tuple(context.items()))
                if len(text) <= SCAN_LIMIT
                else _run(reward.task, text, database, context)
            )
            out.append(pick(result))
        return out

    reward.task = task  # type: ignore[attr-defined]
    reward.__name__ = name
    return reward


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
