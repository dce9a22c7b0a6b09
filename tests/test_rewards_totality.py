"""Every scorer is total: any string, of any size, any Unicode -> a number in [0, 1], never raises.

Property tests with hypothesis over arbitrary text and over text built from the pieces the
scorers look for (JSON, SQL, numbers, markdown), with and without context columns.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rewards import SCORERS, score
from rewards.push import OBJECTIVES

PIECES = st.sampled_from(
    [
        "{", "}", '"sentiment"', ":", ",", "4,5", "true", "null", "[", "]", "```json", "```sql",
        "SELECT", "FROM", "WHERE", "JOIN", "GROUP BY", "WITH RECURSIVE", ";", "orders",
        "customers", "COUNT(*)", "'SP'", "\n", "- ", "## ", "1. ", "**", "14,8%", "R$ 1.210,50",
        "9,671,454", "1.234.567,89", "recomendo", "priorizar", "cliente", "Prezado",
        "atenciosamente", "você", "ção", "😢",
        "\x00", "\u202e", "\ufeff", "ß", "ﬁ", "İ",
    ]
)  # fmt: skip
# Digits and separators in any order: "9,671,454" once crashed the grounding parser mid-training.
NUMBER_LIKE = st.from_regex(r"\d{1,4}(?:[.,]\d{1,4}){0,4}", fullmatch=True)
STRUCTURED = st.lists(PIECES | NUMBER_LIKE | st.text(max_size=20), max_size=60).map(" ".join)
ANY_TEXT = st.text(max_size=3000)
CONTEXTS = st.fixed_dictionaries(
    {},
    optional={
        "review_score": st.none() | st.integers(1, 5),  # others are a ContextError
        "gold_delivered_late": st.none() | st.booleans(),
        "gold_category": st.none() | st.text(max_size=30),
        "gold_answer": st.none() | st.text(max_size=40) | st.just("[[2972]]"),
        "gold_sql": st.none() | st.text(max_size=40),
        "data_summary": st.none() | st.text(max_size=300) | STRUCTURED,
        "question": st.none() | st.text(max_size=60) | STRUCTURED,
        "push_objective": st.none() | st.sampled_from(sorted(OBJECTIVES)),
    },
)

PROPERTY = settings(
    max_examples=150,
    deadline=3000,  # bounded time per example (SQL included), with slack for a loaded CI
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _check(task: str, text: str, context: dict, database: str | None) -> None:
    result = score(task, text, database=database, **context)
    assert 0.0 <= result.total <= 1.0
    assert all(isinstance(value, float) for value in result.components.values())


@pytest.mark.parametrize("task", list(SCORERS))
@PROPERTY
@given(text=ANY_TEXT | STRUCTURED, context=CONTEXTS)
def test_any_text_any_context_scores_in_unit_interval(prepared, task, text, context) -> None:
    store, manifest = prepared
    _check(task, text, context, store.path(manifest.database))


@pytest.mark.parametrize("task", list(SCORERS))
@pytest.mark.parametrize(
    "text",
    [
        "a" * 100_000_000,
        "{" * 1_000_000,
        "[" * 200_000 + "]" * 200_000,
        "SELECT " * 200_000 + "FROM orders",
        "1," * 3_000_000,
        "\n- recomendo\n" * 500_000,
        "🎉" * 2_000_000,
    ],
    ids=["100MB", "braces", "nesting", "selects", "numbers", "bullets", "emoji"],
)
def test_huge_and_pathological_inputs(prepared, task: str, text: str) -> None:
    store, manifest = prepared
    _check(
        task,
        text,
        {"data_summary": "| SP | 1210 |", "review_score": 3},
        store.path(manifest.database),
    )
