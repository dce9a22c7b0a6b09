"""What a reward may read beside the completion: one typed vocabulary for the whole product.

Data prep writes these columns into every prompt row, `tucano score` takes them as a line's
"context", and the TRL adapters and the evaluation hand them to the scorers. A key outside this
vocabulary, or a value of the wrong type, is an error wherever it appears: a misspelled key would
otherwise be dropped and score 0 in silence.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

from rewards.push import OBJECTIVES, objective_named


class RewardContext(TypedDict, total=False):
    review_text: str | None  # extraction: the review, whose words the judgement fields are held to
    review_score: int | None  # extraction gold: the customer's stars, 1-5
    gold_delivered_late: bool | None  # extraction gold: delivered after the estimate
    gold_category: str | None  # extraction gold: the order's product category
    question: str | None  # sql_qa: the business question (for people reading logs)
    gold_sql: str | None  # sql_qa gold: run on the Olist database
    gold_answer: str | None  # sql_qa gold: the expected rows as JSON
    data_summary: str | None  # insights: the table an answer's claims are held to
    analysis_focus: str | None  # insights: what the analysis is asked to focus on
    push_objective: str | None  # push: what the notification is for (rewards/push.py OBJECTIVES)


def _value_type(hint: Any) -> type:
    """`str | None` -> str: every key may be None (a row has no use for it)."""
    (value_type,) = [arg for arg in typing.get_args(hint) if arg is not types.NoneType]
    return value_type


CONTEXT_TYPES: dict[str, type] = {
    key: _value_type(hint) for key, hint in typing.get_type_hints(RewardContext).items()
}
CONTEXT_KEYS: tuple[str, ...] = tuple(CONTEXT_TYPES)


class ContextError(ValueError):
    """A context key outside the vocabulary, or a value of the wrong type or outside what its
    reader takes."""


# Values a key's type allows and its reader does not: stars outside the scale have no sentiment,
# and an objective the push reward does not know would hold the notification to nothing.
VALUES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "review_score": (lambda stars: 1 <= stars <= 5, "a star count from 1 to 5"),
    "push_objective": (
        lambda name: objective_named(name) is not None,
        f"an objective the push reward knows; known: {sorted(OBJECTIVES)}",
    ),
}


def check_context(context: Mapping[str, Any]) -> RewardContext:
    for key, value in context.items():
        if key not in CONTEXT_TYPES:
            raise ContextError(f"unknown context key {key!r}; known: {sorted(CONTEXT_TYPES)}")
        expected = CONTEXT_TYPES[key]
        # True is an int to Python, and 1 is no boolean: both must be what the key says.
        wrong_kind = (expected is bool) != isinstance(value, bool)
        if value is not None and (not isinstance(value, expected) or wrong_kind):
            raise ContextError(f"context {key!r} must be {expected.__name__}, got {value!r}")
        if value is not None and key in VALUES and not VALUES[key][0](value):
            raise ContextError(f"context {key!r} {value!r} is not {VALUES[key][1]}")
    return typing.cast(RewardContext, dict(context))
