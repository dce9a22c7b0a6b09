"""The reward's reading of a review (rewards/review_evidence.py) against 180 one- to three-star
reviews that two people read blind to the reward code (data/audit/low_star_readings.jsonl), 260
one- and two-star reviews that three more read the same way (low_star_readings_2.jsonl), and
June 2018's 70 one- and two-star reviews read for the unseen-month check: of the problems a
person found, how many the reading finds stated, and how many it finds where the person found
none. What the SFT references teach and what GRPO is paid for is this reading, so a model is not
taught to flag a complaint the reading does not find."""

from __future__ import annotations

import json

import pytest

from rewards.review_evidence import ISSUES, read_review
from tasks.core.caching import PROJECT_ROOT

READINGS = PROJECT_ROOT / "data" / "audit" / "low_star_readings.jsonl"
MORE_READINGS = PROJECT_ROOT / "data" / "audit" / "low_star_readings_2.jsonl"
# June 2018's one- and two-star reviews, read blind for benchmarks/unseen_month.py and never to
# write a cue: what the reading finds there is what a model trained on it is taught of a month it
# never saw. Issue 53 asks the model for two thirds of the product and of the seller complaints;
# its teacher finds 9 of 16 and 9 of 20.
JUNE = PROJECT_ROOT / "data" / "audit" / "june2018_low_star_readings.jsonl"
# Per set and issue: the least share of a person's problems the reading finds, and the most
# share of the reviews without one where it finds one (as measured 2026-11-28, rounded down and
# up: the dev set's misses wrote the product and seller cues; the val set was read after the
# second set of cues, and both wrote the third; June never did, but 7 of its 70 reviews are in
# the dev and val sets too, data/audit/README.md). No cue
# came from the dev2, val2 and val3 sets (read 2026-11-29): what the reading finds there is what
# it finds of complaints it was not written from.
FLOORS = {
    ("dev", "delivery_issue"): (0.85, 0.15),
    ("dev", "product_issue"): (0.9, 0.05),
    ("dev", "seller_issue"): (0.85, 0.1),
    ("val", "delivery_issue"): (0.75, 0.15),
    ("val", "product_issue"): (0.65, 0.05),
    ("val", "seller_issue"): (0.65, 0.1),
    ("dev2", "delivery_issue"): (0.8, 0.1),
    ("dev2", "product_issue"): (0.6, 0.05),
    ("dev2", "seller_issue"): (0.4, 0.1),
    ("val2", "delivery_issue"): (0.6, 0.15),
    ("val2", "product_issue"): (0.15, 0.05),
    ("val2", "seller_issue"): (0.45, 0.05),
    ("val3", "delivery_issue"): (0.85, 0.1),
    ("val3", "product_issue"): (0.6, 0.05),
    ("val3", "seller_issue"): (0.45, 0.05),
    ("june", "delivery_issue"): (0.8, 0.15),
    ("june", "product_issue"): (0.55, 0.05),
    ("june", "seller_issue"): (0.45, 0.1),
}


# Each set: its file, the `set` its lines carry (June's file is one set and names none), its size.
SETS = {
    "dev": (READINGS, "dev", 90),
    "val": (READINGS, "val", 90),
    "dev2": (MORE_READINGS, "dev2", 80),
    "val2": (MORE_READINGS, "val2", 80),
    "val3": (MORE_READINGS, "val3", 100),
    "june": (JUNE, None, 70),
}


def _found(review: dict, issue: str) -> bool:
    reading = read_review(
        review["review_text"], review["review_score"], review.get("gold_delivered_late")
    )
    return issue in reading.stated_problems()


@pytest.mark.parametrize(("group", "issue"), list(FLOORS))
def test_the_reading_finds_the_problems_a_person_found(group: str, issue: str) -> None:
    readings, tag, size = SETS[group]
    reviews = [
        review
        for review in map(json.loads, readings.read_text(encoding="utf-8").splitlines())
        if review.get("set") == tag
    ]
    assert len(reviews) == size and issue in ISSUES
    with_problem = [review for review in reviews if review[issue]]
    without = [review for review in reviews if not review[issue]]
    recall, false_share = FLOORS[group, issue]
    found = sum(_found(review, issue) for review in with_problem)
    alarms = sum(_found(review, issue) for review in without)
    assert found >= recall * len(with_problem), (found, len(with_problem))
    assert alarms <= false_share * len(without), (alarms, len(without))
