"""How the held-out answers' sentiment reads the reviews' stars, logged with every eval.

The held-out reward can rise while the policy says one sentiment to every review: seed 456 of a
cpu_smol run learned "negativo" for all (0 of 25 four- and five-star eval reviews), and its
held-out reward rose 0.650 → 0.688 because 9 of its 16 held-out reviews had one or two stars.
Each scored batch logs, through TRL's `log_metric`, how many extraction answers on 1-2 and on 4-5
star reviews say the sentiment the stars call for; the stop rules keep no step whose agreement is
below the start's (stopping.py). The measure is the monitor's (tasks/production/checks.py): the
mean of the two groups' shares, so a constant answer reads 50% whatever the mix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rewards import RewardFunction
from rewards.common import completion_text
from rewards.extraction import stated_sentiment
from rewards.review_evidence import STAR_GROUPS, star_sentiment

JUDGED = ("negativo", "positivo")


def _keys(group: str) -> tuple[str, str]:
    return f"stars_{group}/agreed", f"stars_{group}/reviews"


def with_star_agreement(functions: list[RewardFunction]) -> list[RewardFunction]:
    """`functions`, the first extraction one also logging each batch's counts (counts, not
    shares: TRL averages a metric over the batches of a log, and an eval of several batches then
    keeps the ratio of the sums)."""
    index = next((i for i, f in enumerate(functions) if f.task == "extraction"), None)  # type: ignore[attr-defined]
    if index is None:
        return functions
    scorer = functions[index]

    def reward(
        completions: Sequence[Any], task: Sequence[str], **columns: Any
    ) -> list[float | None]:
        scores = scorer(completions, task, **columns)
        log_metric, stars = columns.get("log_metric"), columns.get("review_score")
        if log_metric is None or stars is None:
            return scores
        counts = {group: [0, 0] for group in JUDGED}
        for completion, row_task, row_stars in zip(completions, task, stars, strict=True):
            expected = star_sentiment(row_stars) if row_stars is not None else None
            if row_task == "extraction" and expected in counts:
                counts[expected][0] += stated_sentiment(completion_text(completion)) == expected
                counts[expected][1] += 1
        for group, (agreed, reviews) in counts.items():
            agreed_key, reviews_key = _keys(group)
            log_metric(agreed_key, agreed)
            log_metric(reviews_key, reviews)
        return scores

    reward.__name__ = scorer.__name__
    reward.task = scorer.task  # type: ignore[attr-defined]
    return [*functions[:index], reward, *functions[index + 1 :]]


def group_agreement(logs: dict[str, Any], prefix: str = "eval_") -> dict[str, float]:
    """Of each star group the logs judged, the share of answers that say what the stars call
    for (1-2 stars "negativo", 4-5 "positivo")."""
    shares = {}
    for group in JUDGED:
        agreed_key, reviews_key = _keys(group)
        agreed, reviews = logs.get(prefix + agreed_key), logs.get(prefix + reviews_key)
        if agreed is not None and reviews:
            shares[group] = agreed / reviews
    return shares


def balanced_agreement(logs: dict[str, Any], prefix: str = "eval_") -> float | None:
    """The mean over the star groups present of the share of answers that say what the stars
    call for; None when the logs have no 1-2 or 4-5 star review."""
    shares = group_agreement(logs, prefix)
    return sum(shares.values()) / len(shares) if shares else None


def agreement_words(logs: dict[str, Any], prefix: str = "eval_") -> str:
    """The end of a log line, ", sentiment as the stars say: 1-2 stars 12%, 4-5 stars 100%"; empty
    where no 1-2 or 4-5 star review was answered. A policy that swings to one sentiment shows
    here at the step it happens: on SmolLM2 one GRPO step turned the next step's one-star
    samples from 3 of 4 "negativo" to 1 of 8, long before the next held-out eval."""
    shares = group_agreement(logs, prefix)
    if not shares:
        return ""
    parts = ", ".join(f"{STAR_GROUPS[group]} stars {share:.0%}" for group, share in shares.items())
    return f", sentiment as the stars say: {parts}"
