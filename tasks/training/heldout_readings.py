"""How the held-out answers' sentiment reads the reviews' stars, and how many of the problems the
customers wrote down they flag, logged with every eval.

The held-out reward can rise while the policy says one sentiment to every review, where most
held-out reviews are of the stars that sentiment suits (CHANGELOG.md, "The runs behind the training
code"). Each scored batch logs, through TRL's `log_metric`, how many extraction answers on 1-2 and
on 4-5 star reviews say the sentiment the stars call for; the stop rules keep no step whose
agreement is below the start's (stopping.py). The measure is the monitor's
(tasks/production/checks.py): the mean of the two groups' shares, so a constant answer reads 50%
whatever the mix.

The issue flags can swing the same way: a delivery flag turned off for every review while the
held-out reward rises, judged significantly worse than its start on the eval split. So each batch
also
logs the problems the reward's reading finds stated in the reviews (rewards/review_evidence.py)
and how many of them the answers flag; and the problems it finds ruled out, and how many the
answers flag all the same: a flag turned on for every complaint flags more of the stated problems
and raises a false alarm on every review that rules it out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rewards import RewardFunction
from rewards.common import completion_text
from rewards.extraction import parse_json_object, stated_sentiment
from rewards.review_evidence import STAR_GROUPS, read_review, star_sentiment

JUDGED = ("negativo", "positivo")
# (stated flagged, stated, ruled out flagged, ruled out): counts, summed over an eval's batches.
FLAG_KEYS = (
    "stated_problems/flagged",
    "stated_problems/stated",
    "ruled_out_problems/flagged",
    "ruled_out_problems/ruled_out",
)


def _keys(group: str) -> tuple[str, str]:
    return f"stars_{group}/agreed", f"stars_{group}/reviews"


def with_reading_counts(functions: list[RewardFunction]) -> list[RewardFunction]:
    """`functions`, the first extraction one also logging each batch's counts of sentiments as
    the stars say and of stated problems flagged (counts, not shares: TRL averages a metric over
    the batches of a log, and an eval of several batches then keeps the ratio of the sums)."""
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
        for key, count in _flag_counts(completions, task, stars, columns).items():
            log_metric(key, count)
        return scores

    reward.__name__ = scorer.__name__
    reward.task = scorer.task  # type: ignore[attr-defined]
    return [*functions[:index], reward, *functions[index + 1 :]]


def _flag_counts(
    completions: Sequence[Any],
    task: Sequence[str],
    stars: Sequence[int | None],
    columns: dict[str, Any],
) -> dict[str, int]:
    """Over a batch's extraction answers, each of FLAG_KEYS: the problems the reviews state that
    the answers flag, the problems they state, the problems they rule out that the answers flag,
    and those they rule out."""
    texts = columns.get("review_text") or [None] * len(completions)
    late = columns.get("gold_delivered_late") or [None] * len(completions)
    counts = dict.fromkeys(FLAG_KEYS, 0)
    flagged_keys, of_keys = FLAG_KEYS[0::2], FLAG_KEYS[1::2]
    for completion, row_task, row_stars, text, row_late in zip(
        completions, task, stars, texts, late, strict=True
    ):
        if row_task != "extraction" or row_stars is None:
            continue
        reading = read_review(text, row_stars, row_late)
        data, _ = parse_json_object(completion_text(completion))
        problem_lists = (reading.stated_problems(), reading.ruled_out_problems())
        for flagged, of, problems in zip(flagged_keys, of_keys, problem_lists, strict=True):
            counts[flagged] += sum(data is not None and data.get(name) is True for name in problems)
            counts[of] += len(problems)
    return counts


def _flagged_share(logs: dict[str, Any], prefix: str, keys: tuple[str, str]) -> float | None:
    flagged, of = (logs.get(prefix + key) for key in keys)
    return flagged / of if flagged is not None and of else None


def stated_flagged_share(logs: dict[str, Any], prefix: str = "eval_") -> float | None:
    """The share of the problems the held-out reviews state that the answers flag; None where
    they state none."""
    return _flagged_share(logs, prefix, FLAG_KEYS[:2])


def ruled_out_flagged_share(logs: dict[str, Any], prefix: str = "eval_") -> float | None:
    """The share of the problems the held-out reviews rule out that the answers flag (false
    alarms); None where they rule out none."""
    return _flagged_share(logs, prefix, FLAG_KEYS[2:])


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
    """The end of a log line, ", sentiment as the stars say: 1-2 stars 12%, 4-5 stars 100%, stated
    problems flagged 80%, ruled out problems flagged 10%"; empty where no review was judged. A
    policy that swings to one sentiment shows here at the step it happens: on SmolLM2 one GRPO
    step turned the next step's one-star samples from 3 of 4 "negativo" to 1 of 8, long before
    the next held-out eval."""
    shares = group_agreement(logs, prefix)
    parts = ", ".join(f"{STAR_GROUPS[group]} stars {share:.0%}" for group, share in shares.items())
    words = f", sentiment as the stars say: {parts}" if shares else ""
    for name, share in (
        ("stated", stated_flagged_share(logs, prefix)),
        ("ruled out", ruled_out_flagged_share(logs, prefix)),
    ):
        words += f", {name} problems flagged {share:.0%}" if share is not None else ""
    return words


_TASK_REWARD = re.compile(r"eval_rewards/(\w+)_reward/mean")


def task_means(logs: dict[str, Any]) -> dict[str, float]:
    """Each trained task's held-out mean, where the held-out prompts are of more than one task:
    their mean mixes them, and a gain on one hides a loss on the other."""
    # TRL logs None for a reward function none of the held-out prompts calls.
    means = {
        m.group(1): value
        for key, value in logs.items()
        if (m := _TASK_REWARD.fullmatch(key)) and value is not None
    }
    return means if len(means) > 1 else {}


def task_rewards_words(logs: dict[str, Any]) -> str:
    """Each task's held-out mean, as " (extraction 0.851, insights 0.341)"; empty for one task."""
    means = task_means(logs)
    if not means:
        return ""
    return " (" + ", ".join(f"{task} {value:.3f}" for task, value in sorted(means.items())) + ")"
