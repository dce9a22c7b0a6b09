"""The reward audit gate: passes on the shipped human scores, fails loudly on known bug classes."""

from pathlib import Path

import pytest

import rewards
from configs.recipe import AuditConfig
from rewards import TASKS, extraction, review_evidence
from tasks.evaluation.audit import (
    AUDIT_PAIRS,
    AUDIT_SET,
    audit_rewards,
    failure_message,
    load_audit_set,
    load_pairs,
)


def _db(prepared) -> str:
    store, manifest = prepared
    return store.path(manifest.database)


def test_shipped_audit_set_spans_every_task() -> None:
    rows = load_audit_set()
    for task in TASKS:
        scores = [r["human_score"] for r in rows if r["task"] == task]
        assert len(scores) >= 25
        assert min(scores) == 0.0 and max(scores) == 1.0  # terrible to excellent
    assert all(r["reason"].strip() for r in rows)


def test_gate_passes_on_the_shipped_rewards(prepared) -> None:
    result = audit_rewards(AuditConfig(), _db(prepared))
    assert result.passed, failure_message(result, AuditConfig())
    for task in TASKS:
        assert result.per_task[task]["rho"] >= 0.8
    assert result.per_task["pairs"]["agreement"] >= 0.9


def test_gate_fails_when_a_reward_prefers_long_answers(prepared, monkeypatch) -> None:
    monkeypatch.setitem(
        rewards.SCORERS, "push", lambda text, **_: rewards.Score(min(1.0, len(text) / 300))
    )
    result = audit_rewards(AuditConfig(), _db(prepared))
    assert not result.passed
    assert not result.per_task["push"]["passed"]
    message = failure_message(result, AuditConfig())
    assert "push: Spearman rho" in message and "worst:" in message


def test_gate_catches_the_bare_isinstance_int_bug(prepared, monkeypatch) -> None:
    monkeypatch.setitem(extraction.VALUE_CHECKS, "sentiment_score", lambda v: isinstance(v, int))
    result = audit_rewards(AuditConfig(), _db(prepared))
    assert not result.per_task["probe:bool_is_not_an_integer"]["passed"]
    assert "bool_is_not_an_integer" in failure_message(result, AuditConfig())


def test_threshold_comes_from_the_recipe(prepared) -> None:
    assert not audit_rewards(AuditConfig(min_spearman=1.0), _db(prepared)).passed


def test_gate_catches_sql_scored_by_looks_alone(prepared, monkeypatch) -> None:
    # The seed's V4.2 SQL reward: tiers for looking like SQL, nothing for the right answer.
    from rewards import sql_qa
    from rewards.sql_sandbox import Execution

    monkeypatch.setattr(sql_qa, "execute", lambda *_: Execution(False, error="not executed"))
    result = audit_rewards(AuditConfig(), _db(prepared))
    assert not result.per_task["probe:sql_must_answer_the_question"]["passed"]


def test_gate_catches_the_ten_word_sql_domain_list(prepared, monkeypatch) -> None:
    from rewards import sql_qa

    monkeypatch.setattr(sql_qa, "DOMAIN_STEMS", sql_qa.DOMAIN_STEMS[:10])
    result = audit_rewards(AuditConfig(), _db(prepared))
    assert not result.per_task["probe:sql_domain_vocabulary_is_broad"]["passed"]


def test_a_bad_audit_line_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "audit.jsonl"
    bad.write_text(
        AUDIT_SET.read_text().splitlines()[0] + "\n" + '{"task": "push", "human_score": 3}\n'
    )
    with pytest.raises(ValueError, match=r"audit.jsonl:2"):
        load_audit_set(bad)


def test_shipped_pairs_span_every_task_and_every_failure_kind() -> None:
    pairs = load_pairs()
    for task in TASKS:
        assert sum(pair["task"] == task for pair in pairs) >= 10
    # cut and looping answers are among the worse ones, on every task
    for task in TASKS:
        assert any(p["worse"]["truncated"] for p in pairs if p["task"] == task), task


@pytest.mark.parametrize(
    ("what", "patch", "caught_by"),
    [
        # a cut answer paid like the same answer ended
        (
            "cut answers",
            lambda mp: mp.setattr(rewards, "CUT_KEEPS", dict.fromkeys(TASKS, 1.0)),
            {"probe:cut_answer_scores_below_the_same_answer_ended"},
        ),
        # copies paid like the answer said once, and no penalty for them
        (
            "loops",
            lambda mp: (
                mp.setattr(rewards, "first_instance", lambda text: text),
                mp.setattr(rewards, "REPETITION_PENALTY", 0.0),
            ),
            {"probe:looping_earns_less_than_once"},
        ),
        # the seed's judgement: a contradiction costs a little, a missed complaint nothing
        (
            "the constant judgement",
            lambda mp: (
                mp.setattr(extraction, "OPPOSITE_KEEPS", 0.8),
                mp.setattr(extraction, "MISSED_KEEPS", 1.0),
            ),
            {"probe:constant_judgement_scores_far_below_a_reading", "probe:missed_complaint_costs"},
        ),
        # last stop's judgement: "neutro" beside a 1 costs nothing more, a fifth on any star
        (
            "the hedge",
            lambda mp: (
                mp.setattr(extraction, "contradicts_itself", lambda *_: False),
                mp.setattr(review_evidence, "EXTREME_STARS", ()),
            ),
            {"probe:hedged_judgement_scores_below_a_reading"},
        ),
        # a recommendation on a one-star review weighed only as evidence, as at stop 46
        (
            "the recommendation",
            lambda mp: mp.setattr(
                review_evidence.Reading,
                "missed",
                lambda reading, answer, missed=review_evidence.Reading.missed: [
                    name for name in missed(reading, answer) if name != "would_recommend"
                ],
            ),
            {"probe:recommending_a_complaint_costs"},
        ),
        # a problem the order's dates rule out, reported, costs only its evidence, as at stop 48
        (
            "the false alarm",
            lambda mp: mp.setattr(extraction, "INVENTED_KEEPS", 1.0),
            {"probe:invented_complaint_costs"},
        ),
        # "sem defeito" read as a defect
        (
            "negation",
            lambda mp: mp.setattr(review_evidence, "NEGATORS", ()),
            {"probe:negation_is_read"},
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_gate_catches_a_reward_that_pays_for_shape(prepared, monkeypatch, what, patch, caught_by):
    patch(monkeypatch)
    result = audit_rewards(AuditConfig(), _db(prepared))
    assert not result.passed, what
    assert {name for name in caught_by if not result.per_task[name]["passed"]} == caught_by
    message = failure_message(result, AuditConfig())
    assert all(name.removeprefix("probe:") in message for name in caught_by)


def test_a_bad_pair_line_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "pairs.jsonl"
    bad.write_text(AUDIT_PAIRS.read_text().splitlines()[0] + "\n" + '{"task": "push"}\n')
    with pytest.raises(ValueError, match=r"pairs.jsonl:2"):
        load_pairs(bad)
