"""Answer-length summaries and worst regressions, against hand-made rows."""

from __future__ import annotations

import pytest

from tasks.evaluation.eval_summary import (
    EXCERPT_CHARS,
    generation_summary,
    render_sentiment_by_stars,
    render_worst_regressions,
    sentiment_by_stars,
    worst_regressions,
)


def _row(prompt_id: str, task: str, total: float, completion: str = "", tokens: int = 5) -> dict:
    return {
        "prompt_id": prompt_id,
        "task": task,
        "total": total,
        "completion": completion or f"answer to {prompt_id}",
        "tokens": tokens,
        "truncated": tokens >= 10,
    }


BASE = [_row("a", "push", 0.9), _row("b", "push", 0.5), _row("c", "sql_qa", 0.8, tokens=10)]


def test_generation_summary_counts_tokens_and_truncation_per_task_and_overall() -> None:
    summary = generation_summary({"base": BASE})["base"]
    assert summary["push"] == {
        "n": 2, "mean_tokens": 5.0, "max_tokens": 5, "truncated_share": 0.0, "mean_total": 0.7
    }  # fmt: skip
    assert summary["sql_qa"]["truncated_share"] == 1.0
    assert summary["overall"]["n"] == 3
    assert summary["overall"]["truncated_share"] == pytest.approx(1 / 3)
    assert "extraction" not in summary  # no rows, no line


def test_worst_regressions_are_the_largest_drops_over_every_seed_worst_first() -> None:
    tuned = {
        1: [_row("a", "push", 0.2), _row("b", "push", 0.6), _row("c", "sql_qa", 0.7)],
        2: [_row("a", "push", 0.85), _row("b", "push", 0.1), _row("c", "sql_qa", 0.8)],
    }
    worst = worst_regressions(BASE, tuned, prompts={"a": "Escreva um push"}, count=3)
    assert [(w["prompt_id"], w["seed"]) for w in worst] == [("a", 1), ("b", 2), ("c", 1)]
    assert worst[0]["delta"] == pytest.approx(-0.7)
    assert worst[0]["prompt"] == "Escreva um push" and worst[1]["prompt"] is None
    assert worst[0]["start_completion"] == "answer to a"
    # improvements and ties are never regressions
    assert worst_regressions(BASE, {1: BASE}) == []


def test_a_completion_with_its_own_fences_cannot_break_the_report() -> None:
    sql = "```sql\nSELECT 1;\n```\n" + "x" * (2 * EXCERPT_CHARS)
    regression = worst_regressions([_row("q", "sql_qa", 1.0)], {7: [_row("q", "sql_qa", 0.0, sql)]})
    markdown = "\n".join(render_worst_regressions(regression))
    assert "\n````text\n```sql\nSELECT 1;\n```\n" in markdown  # a longer fence wraps it
    assert markdown.count("````") == 2
    assert "[…]" in markdown and len(markdown) < 3 * EXCERPT_CHARS


def _extraction(prompt_id: str, sentiment: str | None) -> dict:
    said = f'"sentiment": "{sentiment}", ' if sentiment else ""
    return _row(prompt_id, "extraction", 0.5, f'{{{said}"sentiment_score": 1}}')


def test_the_sentiment_is_counted_against_the_stars_per_model() -> None:
    """What SmolLM2 did: the SFT model "negativo" to every review, a GRPO seed "neutro" to every
    review; the mean reward hides both, the counts per star group do not."""
    stars = {"one": 1, "two": 2, "three": 3, "five": 5, "q": None}
    sft = [_extraction(p, "negativo") for p in ("one", "two", "three", "five")]
    hedge = [_extraction(p, "neutro") for p in ("one", "two", "three")] + [
        _extraction("five", None),  # no sentiment said: not agreeing
        _row("q", "sql_qa", 1.0, '{"sentiment": "negativo"}'),  # another task: not counted
    ]
    summary = sentiment_by_stars({"base": sft, "seed 1": hedge}, stars)
    assert summary == {
        "base": {"negativo": [2, 2], "neutro": [0, 1], "positivo": [0, 1]},
        "seed 1": {"negativo": [0, 2], "neutro": [1, 1], "positivo": [0, 1]},
    }
    markdown = "\n".join(render_sentiment_by_stars(summary))
    assert "| base | 2 of 2 (100%) | 0 of 1 (0%) | 0 of 1 (0%) |" in markdown
    assert "| seed 1 | 0 of 2 (0%) | 1 of 1 (100%) | 0 of 1 (0%) |" in markdown
