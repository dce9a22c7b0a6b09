"""What the statistics alone hide: how long and how often cut off the answers were, and the
prompts where a tuned model got worse, with both completions side by side."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from rewards import TASKS
from rewards.extraction import stated_sentiment
from rewards.review_evidence import SENTIMENT_ORDER, star_sentiment
from tasks.evaluation.stats import OVERALL

# Enough to see what went wrong in a regression without flooding report.md; report.json keeps
# the full completions.
EXCERPT_CHARS = 600
WORST_REGRESSIONS = 5


def generation_summary(
    rows_by_model: dict[str, list[dict[str, Any]]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per model, per task and overall: answers, mean tokens, truncated share, mean score."""
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for model, model_rows in rows_by_model.items():
        summary[model] = {}
        for task in (*TASKS, OVERALL):
            selected = [r for r in model_rows if task == OVERALL or r["task"] == task]
            if not selected:
                continue
            summary[model][task] = {
                "n": len(selected),
                "mean_tokens": float(np.mean([r["tokens"] for r in selected])),
                "max_tokens": int(max(r["tokens"] for r in selected)),
                "truncated_share": float(np.mean([bool(r["truncated"]) for r in selected])),
                "mean_total": float(np.mean([r["total"] for r in selected])),
            }
    return summary


def sentiment_by_stars(
    rows_by_model: dict[str, list[dict[str, Any]]], stars: dict[str, int]
) -> dict[str, dict[str, list[int]]]:
    """Per model, per sentiment the stars call for (1-2 negativo, 3 neutro, 4-5 positivo): how
    many extraction answers say it, of how many. The mean reward can rise while a model says one
    sentiment to every review (SmolLM2's GRPO answered "neutro" to all 77 one-two and four-five
    star reviews); this shows it, and whether the model GRPO starts from reads the stars."""
    summary: dict[str, dict[str, list[int]]] = {}
    for model, model_rows in rows_by_model.items():
        counts = {sentiment: [0, 0] for sentiment in SENTIMENT_ORDER}
        for row in model_rows:
            if row["task"] != "extraction" or stars.get(row["prompt_id"]) is None:
                continue
            expected = star_sentiment(stars[row["prompt_id"]])
            counts[expected][0] += stated_sentiment(row["completion"]) == expected
            counts[expected][1] += 1
        summary[model] = counts
    return summary


def worst_regressions(
    start_rows: list[dict[str, Any]],
    rows_by_seed: dict[int, list[dict[str, Any]]],
    prompts: dict[str, str] | None = None,
    count: int = WORST_REGRESSIONS,
) -> list[dict[str, Any]]:
    """The (prompt, seed) pairs with the largest score drop from start to tuned, worst first."""
    start_by_id = {row["prompt_id"]: row for row in start_rows}
    drops = [
        (row["total"] - start_by_id[row["prompt_id"]]["total"], seed, row)
        for seed, rows in rows_by_seed.items()
        for row in rows
        if row["total"] < start_by_id[row["prompt_id"]]["total"]
    ]
    drops.sort(key=lambda drop: (drop[0], drop[1], drop[2]["prompt_id"]))
    return [
        {
            "prompt_id": row["prompt_id"],
            "task": row["task"],
            "seed": seed,
            "start_total": start_by_id[row["prompt_id"]]["total"],
            "tuned_total": row["total"],
            "delta": delta,
            "prompt": (prompts or {}).get(row["prompt_id"]),
            "start_completion": start_by_id[row["prompt_id"]]["completion"],
            "tuned_completion": row["completion"],
        }
        for delta, seed, row in drops[:count]
    ]


def last_user_message(prompt: list[dict[str, str]]) -> str:
    return next(m["content"] for m in reversed(prompt) if m["role"] == "user")


def _fenced(text: str) -> str:
    """A code block that a completion's own ``` fences (SQL answers have them) cannot close."""
    excerpt = text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + " […]"
    longest_run = max((len(run) for run in re.findall(r"`+", excerpt)), default=0)
    fence = "`" * max(3, longest_run + 1)
    return f"{fence}text\n{excerpt}\n{fence}"


def render_generation_summary(
    summary: dict[str, dict[str, dict[str, Any]]], title: str = "Answer lengths and truncation"
) -> list[str]:
    lines = [
        f"## {title}",
        "",
        "| Model | Task | n | Mean tokens | Max tokens | Truncated | Mean score |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for model, per_task in summary.items():
        for task, s in per_task.items():
            lines.append(
                f"| {model} | {task} | {s['n']} | {s['mean_tokens']:.1f} | {s['max_tokens']} | "
                f"{100 * s['truncated_share']:.0f}% | {s['mean_total']:.3f} |"
            )
    return [*lines, ""]


def render_sentiment_by_stars(summary: dict[str, dict[str, list[int]]]) -> list[str]:
    lines = [
        "## Extraction: the sentiment against the stars",
        "",
        "| Model | 1-2 stars: negativo | 3 stars: neutro | 4-5 stars: positivo |",
        "|---|---:|---:|---:|",
    ]
    for model, counts in summary.items():
        cells = [
            f"{said} of {n} ({100 * said / n:.0f}%)" if n else "none"
            for said, n in (counts[s] for s in ("negativo", "neutro", "positivo"))
        ]
        lines.append(f"| {model} | {' | '.join(cells)} |")
    return [*lines, ""]


def render_worst_regressions(regressions: list[dict[str, Any]]) -> list[str]:
    lines = ["## Worst regressions", ""]
    if not regressions:
        return [*lines, "No eval prompt scored lower after tuning.", ""]
    for rank, r in enumerate(regressions, start=1):
        lines += [
            f"### {rank}. {r['task']} · `{r['prompt_id']}` · seed {r['seed']}: "
            f"{r['start_total']:.3f} → {r['tuned_total']:.3f} ({r['delta']:+.3f})",
            "",
        ]
        if r["prompt"]:
            lines += ["Prompt:", "", _fenced(r["prompt"]), ""]
        lines += ["Start:", "", _fenced(r["start_completion"]), ""]
        lines += ["Tuned:", "", _fenced(r["tuned_completion"]), ""]
    return lines
