"""Rule-based rewards, one module per task: pure Python, no Prefect, no torch.

`score(task, completion, database=..., truncated=..., **context)` scores one completion; the
context keys are the typed vocabulary of rewards/context.py, and each scorer gets those its
parameters name. Two rules hold for every task, so that no model learns to loop:

- an answer that repeats itself earns no more than its first instance (the lower of the scorer's
  verdict on the whole text and on the text with its repeats dropped), less REPETITION_PENALTY
  times the share of its words that repeat (TRL's repetition measure);
- an answer cut at the token budget (`truncated`: it never ended) keeps only its task's CUT_KEEPS
  share, so a cut answer never scores above the same answer ended.

For
TRL there are two sets of batch adapters (`completions, **dataset_columns -> list[float | None]`,
None for other tasks' rows so TRL ignores them): one total per task, for V4.2's summed
reward, and one function per named component, for GDPO (TRL's
multi_objective_aggregation="normalize_then_sum" normalizes each function within its group
before summing). A row is routed by its `task` column, never by guessing from the text (the
V4.2 reports' classifier scored "reengajamento" insights as pushes).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from rewards import extraction, insights, push, sql_qa
from rewards.common import (
    SCAN_LIMIT,
    Score,
    clamp01,
    completion_text,
    first_instance,
    repeated_share,
)
from rewards.context import CONTEXT_KEYS, RewardContext, check_context

# The product's tasks, in report order (every other list of tasks is this one), each scored by a
# module of its own: its `score`, the share of a score a cut answer keeps (`CUT_KEEPS`; each module
# says why its share fits it) and the components its score reports (`COMPONENTS`).
TASK_MODULES: dict[str, ModuleType] = {
    "extraction": extraction,
    "sql_qa": sql_qa,
    "insights": insights,
    "push": push,
}
TASKS: tuple[str, ...] = tuple(TASK_MODULES)
SCORERS: dict[str, Callable[..., Score]] = {
    task: module.score for task, module in TASK_MODULES.items()
}
# What each scorer reads: its parameters after the completion (context keys; SQL's database).
READS: dict[str, frozenset[str]] = {
    task: frozenset(list(inspect.signature(scorer).parameters)[1:])
    for task, scorer in SCORERS.items()
}
CUT_KEEPS: dict[str, float] = {task: module.CUT_KEEPS for task, module in TASK_MODULES.items()}

# A fully looping answer loses this much beyond earning only its first instance: copies are
# never neutral, they cost the reader the end of the answer.
REPETITION_PENALTY = 0.30
# The two rules above, reported as components of every task's score.
SHARED_COMPONENTS = ("repetition", "cut")

# Every component a task's score can report (those that need gold or a summary only when the row
# has them; a missing one counts 0).
COMPONENTS: dict[str, tuple[str, ...]] = {
    task: (*module.COMPONENTS, *SHARED_COMPONENTS) for task, module in TASK_MODULES.items()
}

RewardFunction = Callable[..., list[float | None]]


class UnknownTaskError(KeyError):
    pass


def score(
    task: str,
    completion: Any,
    database: str | None = None,
    truncated: bool | None = None,
    **context: Any,
) -> Score:
    if task not in SCORERS:
        raise UnknownTaskError(f"unknown task {task!r}; expected one of {list(SCORERS)}")
    return _run(task, completion_text(completion), database, check_context(context), truncated)


def _scorer_verdict(task: str, text: str, database: str | None, context: RewardContext) -> Score:
    reads = READS[task]
    arguments: dict[str, Any] = {key: value for key, value in context.items() if key in reads}
    if "database" in reads:
        arguments["database"] = database
    return SCORERS[task](text, **arguments)


def _run(
    task: str,
    text: str,
    database: str | None,
    context: RewardContext,
    truncated: bool | None = None,
) -> Score:
    whole = _scorer_verdict(task, text, database, context)
    once = first_instance(text)
    if once != text[:SCAN_LIMIT]:
        whole = min(whole, _scorer_verdict(task, once, database, context), key=lambda s: s.total)
    components = dict(whole.components)
    repeated = repeated_share(text[:SCAN_LIMIT])
    components["repetition"] = -REPETITION_PENALTY * repeated if repeated else 0.0
    summed = sum(components.values())
    total = clamp01(whole.total + components["repetition"])
    if truncated:
        total *= CUT_KEEPS[task]
        # What the cut takes, with whatever clamping took before it: the parts add up to the total.
        components["cut"] = total - summed
    return Score(total, components)


@functools.lru_cache(maxsize=4096)
def _cached_run(
    task: str,
    text: str,
    database: str | None,
    context: tuple[tuple[str, Any], ...],
    truncated: bool,
) -> Score:
    # GDPO asks for each component separately; one scoring (one SQL execution) serves them all.
    return _run(task, text, database, dict(context), truncated)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TokenBudget:
    """How a training rollout was cut: TRL hands reward functions each completion's token ids up
    to its end of turn; one as long as the budget, and not ended by an end-of-turn token, was cut
    there."""

    max_tokens: int
    end_ids: frozenset[int]

    def cut(self, ids: Sequence[int]) -> bool:
        return len(ids) >= self.max_tokens and (not ids or ids[-1] not in self.end_ids)


def _batch_adapter(
    task: str,
    name: str,
    database: str | None,
    budget: TokenBudget | None,
    pick: Callable[[Score], float],
) -> RewardFunction:
    def reward(
        completions: Sequence[Any],
        task: Sequence[str],
        completion_ids: Sequence[Sequence[int]] | None = None,
        **columns: Any,
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
            cut = bool(budget and completion_ids is not None and budget.cut(completion_ids[index]))
            # Huge texts are scored without the cache, which would otherwise keep them alive.
            result = (
                _cached_run(reward.task, text, database, tuple(context.items()), cut)
                if len(text) <= SCAN_LIMIT
                else _run(reward.task, text, database, context, cut)
            )
            out.append(pick(result))
        return out

    reward.task = task  # type: ignore[attr-defined]
    reward.__name__ = name
    return reward


def trl_reward_functions(
    database: str | None = None, budget: TokenBudget | None = None
) -> list[RewardFunction]:
    """One total per task (V4.2's summed reward). `database`: the Olist SQLite copy;
    `budget`: how to tell a cut rollout (without it, none counts as cut)."""
    return [
        _batch_adapter(task, f"{task}_reward", database, budget, lambda result: result.total)
        for task in SCORERS
    ]


def trl_component_functions(
    database: str | None = None, budget: TokenBudget | None = None
) -> list[RewardFunction]:
    """One function per (task, component), for GDPO's per-component normalisation."""
    return [
        _batch_adapter(
            task,
            f"{task}_{component}",
            database,
            budget,
            lambda result, component=component: result.components.get(component, 0.0),
        )
        for task, components in COMPONENTS.items()
        for component in components
    ]
