"""The production monitor judges what a reader of the analysis would: answers that are constant,
unparsable or truncated are a drift, each for its own reason; the reference answers of a real eval
split are healthy; the decision lists every check. Answers are scored by the real rewards on the
default data prep of the shipped Olist data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prefect import flow

from configs.recipe import MonitoringConfig
from flows.cli import main
from tasks.core.store import ArtifactStore
from tasks.generation.answering import score_row
from tasks.production.checks import FAIL, NOT_MEASURED, PASS, Answer, run_checks
from tasks.production.monitoring import DRIFT, HEALTHY, LATEST, drift_decision, record_monitoring

CONFIG = MonitoringConfig()
ALPHA = 0.05
CHECKS = [
    "mean_reward",
    "reward_drop",
    "parse_rate",
    "truncated",
    "sentiment_agreement",
    "collapse_sentiment",
    "collapse_churn_risk",
]
# What the model of issue 23 said to every review it parsed: a 1-star answer.
ANSWER = {
    "sentiment": "negativo", "sentiment_score": 1, "delivery_issue": True, "product_issue": True,
    "seller_issue": False, "delivered_late": True, "would_recommend": False, "churn_risk": "alto",
    "product_category": "cama_mesa_banho", "summary": "Produto não chegou.",
}  # fmt: skip
NEGATIVE = json.dumps(ANSWER, ensure_ascii=False)
# What SmolLM2 said to every review before its rewards read them (issue 32): all is well.
POSITIVE = json.dumps(
    {
        **ANSWER,
        "sentiment": "positivo",
        "sentiment_score": 5,
        "delivery_issue": False,
        "product_issue": False,
        "delivered_late": False,
        "would_recommend": True,
        "churn_risk": "baixo",
        "summary": "Produto chegou bem.",
    },
    ensure_ascii=False,
)
# The shape of most of its unparsed answers: no sentiment_score, "summary" over and over until
# the token budget cut it.
RAMBLING = (
    json.dumps({k: v for k, v in ANSWER.items() if k != "sentiment_score"}, ensure_ascii=False)[:-1]
    + ', "summary": "Produto não chegou."' * 6
)


@pytest.fixture(scope="module")
def reviews(prepared) -> list[dict]:
    """The eval split's extraction prompts of the default prep."""
    store, data = prepared
    rows = [row for row in store.read_jsonl(data.eval) if row["task"] == "extraction"]
    # Spread stars, so a collapse is one: at least 3 reviews of 1-2 stars and 3 of 4-5.
    assert len(rows) == 20
    assert sum(row["review_score"] <= 2 for row in rows) >= 3
    assert sum(row["review_score"] >= 4 for row in rows) >= 3
    return rows


def _answers(reviews: list[dict], completion=None, truncated: bool = False) -> list[Answer]:
    """Each review answered with `completion(review)` (its reference answer by default), scored
    by the extraction reward."""
    answers = []
    for review in reviews:
        text = review["reference"] if completion is None else completion(review)
        reward = score_row(review, {"completion": text, "truncated": truncated}, None)["total"]
        answers.append(Answer.of(text, truncated, review["review_score"], reward))
    return answers


def _failed(decision: dict) -> set[str]:
    return {check["check"] for check in decision["checks"] if check["verdict"] == FAIL}


def _check(decision: dict, name: str) -> dict:
    (check,) = [check for check in decision["checks"] if check["check"] == name]
    return check


def test_the_reference_answers_of_the_eval_split_are_healthy(reviews) -> None:
    good = _answers(reviews)
    for reference in (good, None):
        decision = drift_decision(good, reference, CONFIG, ALPHA)
        assert decision["status"] == HEALTHY, decision["reason"]
        assert [check["check"] for check in decision["checks"]] == CHECKS
    measured = drift_decision(good, good, CONFIG, ALPHA)
    assert {check["verdict"] for check in measured["checks"]} == {PASS}
    assert _check(measured, "parse_rate")["value"] == 1.0
    assert _check(measured, "sentiment_agreement")["value"] == 1.0
    # Held to what it showed on its eval split: 100% parsed there, so 90% here, not the 80% floor.
    assert _check(measured, "parse_rate")["threshold"] == pytest.approx(0.90)


@pytest.mark.parametrize(
    ("case", "completion", "truncated", "failed", "because"),
    [
        (
            "constant",
            lambda review: NEGATIVE,
            False,
            {"sentiment_agreement", "collapse_sentiment", "collapse_churn_risk"},
            '100.0% of 20 parsed answers say "negativo", while the largest star group',
        ),
        (
            "unparsable",
            lambda review: "Desculpe, não entendi a avaliação.",
            False,
            {"mean_reward", "reward_drop", "parse_rate"},
            "0.0% of 20 answers (20 unparsed, 20 of them for no JSON object in the completion)",
        ),
        (
            "constant",
            lambda review: POSITIVE,
            False,
            {"sentiment_agreement", "collapse_sentiment", "collapse_churn_risk"},
            '100.0% of 20 parsed answers say "positivo", while the largest star group',
        ),
        ("truncated", None, True, {"truncated"}, "100.0% of 20 answers cut, allows at most 10.0%"),
    ],
    ids=["constant", "unparsable", "constant-positivo", "truncated"],
)
def test_broken_answers_are_a_drift_with_the_right_reasons(
    reviews, case, completion, truncated, failed, because
) -> None:
    good = _answers(reviews)
    broken = _answers(reviews, completion, truncated)
    decision = drift_decision(broken, good, CONFIG, ALPHA)
    assert decision["status"] == DRIFT
    assert failed <= _failed(decision)
    assert because in decision["reason"]
    # Nothing it got right is called wrong (a cut answer also costs reward: the reward checks
    # may see it too).
    right = {"constant": {"parse_rate", "truncated"}, "unparsable": {"truncated"}}
    right["truncated"] = set(CHECKS) - {"truncated", "mean_reward", "reward_drop"}
    assert not right[case] & _failed(decision)
    if case == "unparsable":
        # Nothing parsed: agreement and collapse cannot be measured, which is not a pass.
        unmeasured = {c["check"] for c in decision["checks"] if c["verdict"] == NOT_MEASURED}
        assert unmeasured == {"sentiment_agreement", "collapse_sentiment", "collapse_churn_risk"}


def test_the_issue_s_output_is_a_drift_for_every_reason_it_has(reviews) -> None:
    """29% parsed, all truncated, every parsed answer "negativo": the V4.2 reports' reward alone
    called it healthy; the checks and the reward, which now pays for a judgement and an ended
    answer, do not."""
    # 6 of 20 parsed (30%), on reviews of both kinds of stars.
    negative = [review["prompt_id"] for review in reviews if review["review_score"] <= 2]
    positive = [review["prompt_id"] for review in reviews if review["review_score"] >= 4]
    parsed = {*negative[:3], *positive[:3]}
    broken = _answers(
        reviews,
        lambda review: NEGATIVE if review["prompt_id"] in parsed else RAMBLING,
        truncated=True,
    )
    decision = drift_decision(broken, _answers(reviews), CONFIG, ALPHA)
    assert decision["status"] == DRIFT
    assert {"parse_rate", "truncated", "collapse_sentiment"} <= _failed(decision)
    assert "(14 unparsed, 14 of them for missing field(s): sentiment_score)" in decision["reason"]
    assert _check(decision, "mean_reward")["verdict"] == FAIL


@pytest.mark.parametrize(
    ("rewards", "reference", "drop_test", "status", "because"),
    [
        ([0.8, 0.7, 0.9], [0.8, 0.7, 0.9], True, HEALTHY, "no significant drop"),
        ([0.3, 0.4, 0.35], [0.3, 0.4, 0.35], True, DRIFT, "below the floor 0.50"),
        ([0.6, 0.62, 0.58], [0.9, 0.92, 0.88], True, DRIFT, "significantly lower"),
        ([0.6, 0.62, 0.58], [0.9, 0.92, 0.88], False, HEALTHY, "monitoring.drop_test is off"),
    ],
    ids=["same-level", "under-floor", "significant-drop", "drop-test-off"],
)
def test_the_reward_floor_and_drop_test_still_hold(
    reviews, rewards, reference, drop_test, status, because
) -> None:
    """Good answers, with the rewards a case gives them: only the reward checks can decide."""
    good = _answers(reviews)

    def rewarded(values: list[float]) -> list[Answer]:
        return [a._replace(reward=values[i % len(values)]) for i, a in enumerate(good)]

    config = MonitoringConfig(drop_test=drop_test)
    decision = drift_decision(rewarded(rewards), rewarded(reference), config, ALPHA)
    assert decision["status"] == status
    assert _failed(decision) <= {"mean_reward", "reward_drop"}
    reward_checks = " ".join(c["reason"] for c in decision["checks"][:2])
    assert because in reward_checks


def test_collapse_needs_spread_stars(reviews) -> None:
    """Every answer "positivo" on reviews that are all 4-5 stars is no collapse: the stars say
    the same."""
    happy = [review for review in reviews if review["review_score"] >= 4]
    checks = {check.check: check for check in run_checks(_answers(happy), None, CONFIG, ALPHA)}
    collapse = checks["collapse_sentiment"]
    assert collapse.value == 1.0 and collapse.threshold == 1.0 and collapse.verdict == PASS


@pytest.mark.usefixtures("prefect_api")
def test_the_decision_file_lists_every_check(reviews, tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    broken = _answers(reviews, lambda review: NEGATIVE, truncated=True)
    decision = drift_decision(broken, _answers(reviews), CONFIG, ALPHA)
    # As the analysis flow records it: its artifact belongs to a flow run.
    uri = flow(name="record-monitoring")(record_monitoring)({**decision, "model": "seed 1"}, store)
    recorded = json.loads(Path(uri).read_text())
    assert recorded == store.read_json(LATEST)
    assert [check["check"] for check in recorded["checks"]] == CHECKS
    for check in recorded["checks"]:
        assert check["verdict"] in (PASS, FAIL, NOT_MEASURED)
        assert check["value"] is not None and check["threshold"] is not None and check["reason"]
        assert (check["reference"] is None) == (check["check"] == "reward_drop")
    assert recorded["status"] == DRIFT
    assert all(c["label"] in recorded["reason"] for c in recorded["checks"] if c["verdict"] == FAIL)


def _score_lines(reviews: list[dict], completion, truncated) -> list[str]:
    return [
        json.dumps(
            {
                "task": "extraction",
                "completion": completion(review),
                "context": {"review_score": review["review_score"]},
                **({} if truncated is None else {"truncated": truncated}),
            }
        )
        for review in reviews
    ]


def test_offline_scoring_summarises_the_same_checks(reviews, tmp_path: Path, capsys) -> None:
    source, out = tmp_path / "logs.jsonl", tmp_path / "scored.jsonl"
    source.write_text("\n".join(_score_lines(reviews, lambda review: NEGATIVE, True)) + "\n")
    assert main(["score", "--input", str(source), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "**Monitoring: drift** (20 answers; the model's eval split: not known" in printed
    for label in ("Truncated at the token budget", "One sentiment for most answers"):
        assert f"| {label} |" in printed
    assert "| Rewards not below the eval split's | n/a |" in printed  # no model, no eval split
    assert len(out.read_text().splitlines()) == 20

    # Without --output the lines go to stdout and the summary to stderr; good answers that do
    # not say whether they were cut leave truncation unmeasured.
    source.write_text("\n".join(_score_lines(reviews, lambda r: r["reference"], None)) + "\n")
    assert main(["score", "--input", str(source)]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 20
    assert "**Monitoring: healthy**" in captured.err
    unmeasured = "| n/a | at most 10.0% | n/a | not measured | no answer says whether it was cut"
    assert f"| Truncated at the token budget {unmeasured}" in captured.err


def test_a_truncated_flag_that_is_no_boolean_is_a_bad_line(tmp_path: Path, capsys) -> None:
    source = tmp_path / "logs.jsonl"
    source.write_text(
        json.dumps({"task": "extraction", "completion": NEGATIVE, "truncated": 1}) + "\n"
    )
    assert main(["score", "--input", str(source), "--output", str(tmp_path / "o.jsonl")]) == 1
    assert "line 1: 'truncated' must be true or false, not 1" in capsys.readouterr().err
