"""The reference answers SFT learns from score high with the rewards themselves: SFT must teach
what the rewards want, from the same data (and the audit gate is unchanged by them)."""

from __future__ import annotations

import json
from statistics import mean

import pytest

from rewards import TASKS, score
from rewards.context import CONTEXT_KEYS
from tasks.core.caching import PROJECT_ROOT

# The least each task's references must score on average, and at worst. Extraction and SQL are
# right by construction (gold values, gold SQL); an analysis and a push are written by template.
FLOORS = {
    "extraction": (0.95, 0.80),
    "sql_qa": (0.95, 0.85),
    "insights": (0.85, 0.70),
    "push": (0.85, 0.70),
}


@pytest.fixture(scope="module")
def scored(prepared) -> dict[str, list[float]]:
    store, manifest = prepared
    database = str(manifest.local_database(store))
    totals: dict[str, list[float]] = {task: [] for task in TASKS}
    for row in store.read_jsonl(manifest.train):
        context = {key: row[key] for key in CONTEXT_KEYS}
        totals[row["task"]].append(
            score(row["task"], row["reference"], database=database, **context).total
        )
    return totals


@pytest.mark.parametrize("task", TASKS)
def test_references_score_high(scored: dict[str, list[float]], task: str) -> None:
    average, worst = FLOORS[task]
    assert mean(scored[task]) >= average, task
    assert min(scored[task]) >= worst, task


def test_every_prompt_has_a_reference(prepared) -> None:
    store, manifest = prepared
    for name in ("train", "eval"):
        for row in store.read_jsonl(getattr(manifest, name)):
            assert isinstance(row["reference"], str) and row["reference"].strip(), row["prompt_id"]


def test_an_extraction_reference_is_the_data_s_truth(prepared) -> None:
    store, manifest = prepared
    for row in store.read_jsonl(manifest.train):
        if row["task"] != "extraction":
            continue
        answer = json.loads(row["reference"])
        assert answer["sentiment_score"] == row["review_score"]
        assert answer["delivered_late"] is bool(row["gold_delivered_late"])
        assert answer["product_category"] == (row["gold_category"] or "não informada")


def test_an_extraction_reference_writes_its_fields_in_the_order_the_prompt_asks(prepared) -> None:
    """SFT teaches the order it is shown: the system message's, which a model asked for the
    fields writes them in."""
    from rewards.extraction import FIELDS

    store, manifest = prepared
    rows = [row for row in store.read_jsonl(manifest.train) if row["task"] == "extraction"]
    assert rows
    instructions = rows[0]["prompt"][0]["content"]
    listed = sorted(FIELDS, key=lambda name: instructions.index(f'"{name}"'))
    assert listed == list(FIELDS)
    for row in rows:
        assert list(json.loads(row["reference"])) == listed, row["prompt_id"]


READINGS = PROJECT_ROOT / "data" / "audit" / "readings.jsonl"
JUDGEMENT = ("delivery_issue", "product_issue", "seller_issue", "would_recommend", "churn_risk")
# Where the rule-written reference (the extraction reward's own reading) and the person part on a
# field the person was sure of: the reading's blind spots, each a cue it lacks. Fixing one makes
# this test fail until it leaves the list.
KNOWN_MISSES = {
    ("0e78e53b", "delivery_issue"),  # cancelled after 45 days "por divergência de estoque"
    ("0e78e53b", "seller_issue"),
    ("38cae21b", "seller_issue"),  # "a empresa responsável deveria dar alguma resposta"
    ("5b33612a", "product_issue"),  # "não tão bem acabado quanto na foto"
}


def test_an_extraction_reference_reads_a_review_as_a_person_does(prepared) -> None:
    """20 train reviews read by a person blind to the reward code (data/audit/readings.jsonl):
    the references SFT learns from agree with them on every judgement field the person was sure
    of (60 of 64 today: "demora para resolver" is the seller's since 2026-12-01), but the
    misses listed above."""
    store, manifest = prepared
    references = {
        row["prompt_id"]: json.loads(row["reference"])
        for row in store.read_jsonl(manifest.train)
        if row["task"] == "extraction"
    }
    misses = set()
    for line in READINGS.read_text(encoding="utf-8").splitlines():
        person = json.loads(line)
        reference = references[person["prompt_id"]]
        misses |= {
            (person["prompt_id"].removeprefix("extraction-")[:8], field)
            for field in JUDGEMENT
            if person["confident"][field] and reference[field] != person[field]
        }
    assert misses == KNOWN_MISSES
