"""The order GRPO meets its train prompts in: every step a cross-section of the train split.

A step of four reviews drawn at random is often all one star group. GRPO then pays, on every prompt
of the update, for the sentiment that group calls for, and a 135M model learns that as a bias for
every review, not as a reading of this one (CHANGELOG.md, "The runs behind the default recipe",
`training.prompt_order`). Dealt to target shares of the strata (task, star group), each step holds
each stratum about as often as its share, and what one review pays toward a sentiment the next pays
back where the stars say otherwise.

With `stated_share`, reviews whose words state a problem (a delivery, product or seller issue
the reward reads as stated) are a stratum of their own with that share of their task's prompts:
the SFT model's answers miss those problems (the reward's largest loss), and the rare sample that
flags one is what GRPO learns from, so the few steps a CPU run affords go where it is.

With `task_shares`, each trained task has that share of the stream whatever its share of the
split: insights are 9% of the default recipe's train prompts, so steps of four prompts dealt as
in the split meet an insights prompt once every third step, and six steps teach it nothing.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from rewards.review_evidence import read_review, star_sentiment

Stratum = tuple[str, str | None, bool | None]


def stratum(row: dict[str, Any], split_stated: bool = False) -> Stratum:
    """(task, star group, whether the review states a problem): the last two None where the
    prompt has no review, the last None where stated problems are not told apart."""
    stars = row.get("review_score")
    if stars is None:
        return row["task"], None, None
    if not split_stated:
        return row["task"], star_sentiment(stars), None
    reading = read_review(row.get("review_text"), stars, row.get("gold_delivered_late"))
    return row["task"], star_sentiment(stars), bool(reading.stated_problems())


def target_shares(
    counts: Counter[Stratum],
    stated_share: float | None,
    task_shares: dict[str, float] | None = None,
) -> dict[Stratum, float]:
    """Each stratum's share of the stream: its task's share (`task_shares`, or the task's share
    of the rows) dealt over the task's strata in proportion to their rows, or, with
    `stated_share`, `stated_share` of it to the task's stated strata and the rest to the others,
    each side in proportion to its rows."""
    total = sum(counts.values())
    shares = {}
    for task in {key[0] for key in counts}:
        in_task = {key: count for key, count in counts.items() if key[0] == task}
        task_share = task_shares[task] if task_shares else sum(in_task.values()) / total
        if stated_share is None or all(key[2] is None for key in in_task):
            rows = sum(in_task.values())
            shares.update({key: task_share * count / rows for key, count in in_task.items()})
            continue
        for stated, side_share in ((True, stated_share), (False, 1 - stated_share)):
            side = {key: count for key, count in in_task.items() if key[2] is stated}
            if not side:
                raise ValueError(
                    f"training.stated_share={stated_share}: the {task} train prompts have no "
                    f"review that {'states a' if stated else 'states no'} problem"
                )
            for key, count in side.items():
                shares[key] = task_share * side_share * count / sum(side.values())
    return shares


def stratified_stream(
    rows: list[dict[str, Any]],
    seed: str,
    count: int,
    stated_share: float | None = None,
    task_shares: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """`count` prompts, each stratum's rows in seeded shuffles one after another, dealt so that
    every prefix holds each stratum as close to its target share as whole rows allow (the one
    furthest below its share comes next, the first met on a tie). With neither `stated_share`
    nor `task_shares`, the first len(rows) prompts are every row once."""
    strata: dict[Stratum, list[dict[str, Any]]] = {}
    for row in rows:
        strata.setdefault(stratum(row, stated_share is not None), []).append(row)
    shares = target_shares(
        Counter({key: len(members) for key, members in strata.items()}), stated_share, task_shares
    )
    taken = dict.fromkeys(strata, 0)
    rounds: dict[Stratum, list[dict[str, Any]]] = {}
    stream = []
    for position in range(1, count + 1):
        behind = max(strata, key=lambda key: position * shares[key] - taken[key])
        members = strata[behind]
        round_number, index = divmod(taken[behind], len(members))
        if index == 0:
            rounds[behind] = members[:]
            random.Random(f"{seed}/{behind}/{round_number}").shuffle(rounds[behind])
        stream.append(rounds[behind][index])
        taken[behind] += 1
    return stream
