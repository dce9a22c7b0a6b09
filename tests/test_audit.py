"""The reward audit gate: passes on the shipped human scores, fails loudly on known bug classes."""

from pathlib import Path

import pytest

import rewards
from configs.recipe import AuditConfig
from rewards import TASKS, extraction
from tasks.evaluation import audit
from tasks.evaluation.audit import (
    AUDIT_PAIRS,
    AUDIT_SET,
    audit_key,
    audit_rewards,
    failure_message,
    kept_audit,
    load_audit_set,
    load_pairs,
)

from .conftest import code_edited


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
    # The V4.2 reports' SQL reward: tiers for looking like SQL, nothing for the right answer.
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


def test_a_bad_pair_line_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "pairs.jsonl"
    bad.write_text(AUDIT_PAIRS.read_text().splitlines()[0] + "\n" + '{"task": "push"}\n')
    with pytest.raises(ValueError, match=r"pairs.jsonl:2"):
        load_pairs(bad)


@pytest.fixture
def scorings(monkeypatch) -> list[AuditConfig]:
    """The configs the audit was scored for, in order (each call really scores)."""
    calls: list[AuditConfig] = []

    def counted(config: AuditConfig, database: str) -> audit.AuditResult:
        calls.append(config)
        return audit_rewards(config, database)

    monkeypatch.setattr(audit, "audit_rewards", counted)
    return calls


def test_a_passing_audit_is_kept_and_not_scored_again(tmp_path: Path, scorings) -> None:
    first = kept_audit(AuditConfig(), tmp_path)
    assert first.passed and len(scorings) == 1
    assert [path.name for path in tmp_path.iterdir()] == [f"{audit_key(AuditConfig())}.json"]
    assert kept_audit(AuditConfig(), tmp_path) == first
    assert len(scorings) == 1
    # Other thresholds are another gate.
    assert audit_key(AuditConfig(min_spearman=0.81)) != audit_key(AuditConfig())
    assert audit_key(AuditConfig(min_pair_agreement=0.95)) != audit_key(AuditConfig())


def test_a_scorer_swapped_in_at_run_time_is_audited_every_time_and_never_kept(
    tmp_path: Path, scorings, monkeypatch
) -> None:
    shipped = audit_key(AuditConfig())
    monkeypatch.setitem(
        rewards.SCORERS, "push", lambda text, **_: rewards.Score(min(1.0, len(text) / 300))
    )
    assert audit_key(AuditConfig()) != shipped
    for _ in range(2):
        assert not kept_audit(AuditConfig(), tmp_path).per_task["push"]["passed"]
    assert len(scorings) == 2
    assert not tmp_path.exists() or not list(tmp_path.iterdir())


def test_editing_a_reward_changes_the_audits_key(tmp_path: Path, monkeypatch) -> None:
    before = audit_key(AuditConfig())
    with code_edited(tmp_path / "project", monkeypatch, "rewards/push.py"):
        assert audit_key(AuditConfig()) != before


def test_a_damaged_kept_audit_is_scored_again_and_replaced(
    tmp_path: Path, scorings, caplog
) -> None:
    kept = tmp_path / f"{audit_key(AuditConfig())}.json"
    kept.write_text('{"passed": tr', encoding="utf-8")
    result = kept_audit(AuditConfig(), tmp_path)
    assert result.passed and len(scorings) == 1
    assert str(kept) in caplog.text and "scoring the audit again" in caplog.text
    assert audit.AuditResult.model_validate_json(kept.read_text(encoding="utf-8")) == result


def test_an_audit_that_cannot_be_kept_still_passes(tmp_path: Path, scorings, caplog) -> None:
    (tmp_path / "home").write_text("a file where the cache's folder would go", encoding="utf-8")
    assert kept_audit(AuditConfig(), tmp_path / "home" / "audits").passed
    assert "could not be kept" in caplog.text and len(scorings) == 1
