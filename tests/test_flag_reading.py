"""benchmarks/flag_reading.py's readouts: a logistic readout finds a flag the words settle, the
model's hidden states are read where it writes each flag (or one field), and the people readout
is fitted on the earlier readings' flags and scored on June 2018's alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import flag_reading
from benchmarks.flag_reading import (
    PEOPLE_FITTED,
    PEOPLE_SCORED,
    THRESHOLD_FOLDS,
    cross_validated_threshold,
    flagged_at,
    low_star_extraction,
    people_sets,
    people_table,
    read_flags,
    readout_scores,
    split_auc,
    threshold_at,
    word_features,
)
from rewards.review_evidence import ISSUES
from tasks.core.store import ArtifactStore

from .conftest import small_training_inputs


def test_a_word_readout_finds_the_flag_its_word_decides_and_not_the_one_it_does_not() -> None:
    said = [True, False] * 20
    reviews = [
        {"review_text": f"pedido {n} " + ("atrasou muito" if flag else "chegou bem")}
        for n, flag in enumerate(said)
    ]
    train, held = reviews[:30], reviews[30:]
    train_words, held_words = word_features(train, train, held)
    scores = readout_scores(train_words, said[:30], held_words)
    assert split_auc(scores, said[30:]) == 1.0
    # The order number is in one review each: below MIN_FEATURE_REVIEWS, it is no feature.
    parity = [n % 4 < 2 for n in range(40)]
    scores = readout_scores(train_words, parity[:30], held_words)
    assert split_auc(scores, parity[30:]) == 0.5


def test_the_hidden_states_are_read_where_each_flag_is_written(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    data, base = small_training_inputs(store)
    model_dir = store.get_dir(base.location, tmp_path / "model")
    # Every extraction prompt of the small split, read as a one-star review.
    rows = [
        {**row, "review_score": 1}
        for row in store.read_jsonl(data.train) + store.read_jsonl(data.eval)
        if row["task"] == "extraction"
    ]
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text("".join(json.dumps(row) + "\n" for row in rows))
    rows = low_star_extraction(eval_file)
    read = read_flags(model_dir, rows, hidden=True)
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir)
    for issue in ISSUES:
        assert [flagged for _, flagged, _ in read[issue]] == [
            json.loads(row["reference"])[issue] is True for row in rows
        ]
        for probability, _, states in read[issue]:
            assert 0.0 < probability < 1.0
            assert states.shape[0] % config.hidden_size == 0
    # Each flag's states are its own position's: the three flags differ for the same review.
    first = [read[issue][0][2] for issue in ISSUES]
    assert not first[0].equal(first[1]) and not first[1].equal(first[2])
    assert read_flags(model_dir, rows)[ISSUES[0]][0][2] is None


def _readings(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_people_sets_fit_on_the_earlier_readings_and_score_june_alone() -> None:
    fitted, scored, shared = people_sets("named")
    june = _readings(PEOPLE_SCORED)
    assert [row["review_id"] for row in scored] == [reading["review_id"] for reading in june]
    assert [row["people"] for row in scored] == [
        {issue: reading[issue] is True for issue in ISSUES} for reading in june
    ]
    # The shipped data's review, as the person read it (title and message each stripped there).
    assert [row["review_text"].split() for row in scored] == [
        reading["review_text"].split() for reading in june
    ]
    first, second = (_readings(path) for path in PEOPLE_FITTED)
    # The first set names a review by its extraction prompt, the second by its id.
    earlier = [(r["prompt_id"][len("extraction-") :], r) for r in first]
    earlier += [(r["review_id"], r) for r in second]
    june_ids = {reading["review_id"] for reading in june}
    kept = [reading for review_id, reading in earlier if review_id not in june_ids]
    assert [row["people"] for row in fitted] == [
        {issue: reading[issue] is True for issue in ISSUES} for reading in kept
    ]
    # As data/audit/README.md and benchmarks/README.md say: 7 of June's in the earlier sets.
    assert (len(fitted), shared) == (433, 7)


def test_a_flag_is_raised_above_all_but_the_allowed_share_of_false_alarms() -> None:
    said = [True, True] + [False] * 10
    scores = [0.9, 0.2, 0.8, 0.3, 0.1, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    # Ten reviews without the problem: one false alarm allowed, the one at 0.8.
    assert flagged_at(scores, said, 0.1) == [True, False, True] + [False] * 9
    assert flagged_at(scores, said, 0.0) == [True] + [False] * 11
    assert flagged_at(scores, said, 1.0) == [True] * 12


def test_the_people_table_fits_on_the_peoples_flags_and_counts_what_it_flags(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    store = ArtifactStore(tmp_path / "store")
    _, base = small_training_inputs(store)
    model_dir = store.get_dir(base.location, tmp_path / "model")
    fitted, scored, _ = people_sets("named")
    calls = []

    def readout(train_x, train_said, eval_x):
        # Each flag read perfectly, but the seller one backwards: what the table makes of it.
        issue = ISSUES[len(calls)]
        calls.append((issue, train_said, eval_x.shape[0]))
        said = [row["people"][issue] for row in scored]
        return [float(s != (issue == "seller_issue")) for s in said]

    monkeypatch.setattr(flag_reading, "readout_scores", readout)
    people_table([model_dir], "named")
    assert [issue for issue, _, _ in calls] == list(ISSUES)
    for issue, train_said, eval_rows in calls:
        assert train_said == [row["people"][issue] for row in fitted]
        assert eval_rows == len(scored)
    cells = {}
    for line in capsys.readouterr().out.splitlines():
        if line.startswith(f"| {model_dir} |"):
            row = [cell.strip() for cell in line.split("|")[2:-1]]
            cells[row[0]] = row[1:]
    count = {issue: sum(row["people"][issue] for row in scored) for issue in ISSUES}
    n = len(scored)
    assert cells["delivery_issue"][2:] == [
        f"{count['delivery_issue']} of {count['delivery_issue']}",
        f"0 of {n - count['delivery_issue']}",
    ]
    assert cells["product_issue"][1:] == [
        "1.00",
        f"{count['product_issue']} of {count['product_issue']}",
        f"0 of {n - count['product_issue']}",
    ]
    assert cells["seller_issue"][1:] == [
        "0.00",
        f"0 of {count['seller_issue']}",
        f"0 of {n - count['seller_issue']}",
    ]
    alone = sum(
        row["people"]["product_issue"] and not row["people"]["delivery_issue"] for row in scored
    )
    assert cells["product_issue, not as delivery"][2] == f"{alone} of {count['product_issue']}"
    assert cells["seller_issue, not as delivery"][2] == f"0 of {count['seller_issue']}"


def test_the_states_read_at_one_field_are_that_fields_for_every_flag(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "store")
    data, base = small_training_inputs(store)
    model_dir = store.get_dir(base.location, tmp_path / "model")
    rows = [row for row in store.read_jsonl(data.train) if row["task"] == "extraction"][:3]
    own = read_flags(model_dir, rows, hidden=True)
    first = read_flags(model_dir, rows, hidden=True, states_at="delivery_issue")
    for k in range(len(rows)):
        for issue in ISSUES:
            assert first[issue][k][2].equal(own["delivery_issue"][k][2])
            # The probabilities stay each flag's own.
            assert first[issue][k][:2] == own[issue][k][:2]
        assert not first["seller_issue"][k][2].equal(own["seller_issue"][k][2])


def test_the_cross_validated_threshold_scores_each_review_by_a_readout_not_fitted_on_it(
    monkeypatch,
) -> None:
    import torch

    said = [n % 3 == 0 for n in range(23)]
    # Each review's feature is its own index and the fake readout scores a review by it, so the
    # folds' scores are known, and each call shows what it was fitted on.
    features = torch.arange(23, dtype=torch.float32).unsqueeze(1)
    calls = []

    def readout(train_x, train_said, eval_x):
        fitted, held = train_x[:, 0].tolist(), eval_x[:, 0].tolist()
        calls.append((fitted, held))
        assert train_said == [said[int(n)] for n in fitted]
        return [n / 100 for n in held]

    monkeypatch.setattr(flag_reading, "readout_scores", readout)
    threshold = cross_validated_threshold(features, said, 0.1)
    assert len(calls) == THRESHOLD_FOLDS
    assert sorted(n for _, held in calls for n in held) == list(range(23))
    assert all(not set(fitted) & set(held) for fitted, held in calls)
    assert threshold == threshold_at([n / 100 for n in range(23)], said, 0.1)


def test_the_references_readout_is_fitted_on_the_train_references_and_chooses_its_threshold_there(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    """With --references the readout learns the train split's references, never June's reviews
    (one put in the train file is left out), and flags June where the fit's own folds put the
    threshold, whatever June's scores would choose."""
    store = ArtifactStore(tmp_path / "store")
    data, base = small_training_inputs(store)
    model_dir = store.get_dir(base.location, tmp_path / "model")
    _, scored, _ = people_sets("named")
    train = [
        {**row, "review_score": 1}
        for row in store.read_jsonl(data.train)
        if row["task"] == "extraction"
    ]
    references = tmp_path / "train.jsonl"
    rows = [*train, {**scored[0], "review_score": 1}]
    references.write_text("".join(json.dumps(row) + "\n" for row in rows))
    count = {issue: sum(row["people"][issue] for row in scored) for issue in ISSUES}
    with pytest.raises(SystemExit, match="extraction_instructions"):
        # The small split's prompts describe the fields; June's would name them.
        people_table([model_dir], "named", references, reviews=len(rows))
    # The folds put delivery's threshold above June's scores, and the others' first above, then
    # below them all.
    for fold_score, flagged in ((2.0, {i: 0 for i in ISSUES}), (-1.0, {**count, ISSUES[0]: 0})):
        finals = []

        def readout(train_x, train_said, eval_x, fold_score=fold_score, finals=finals):
            if len(train_said) < len(train):  # a fold of the threshold's cross-validation
                delivery = ISSUES[len(finals) - 1] == ISSUES[0]
                return [2.0 if delivery else fold_score] * eval_x.shape[0]
            finals.append(train_said)
            # June read perfectly, between the two thresholds the folds choose.
            issue = ISSUES[len(finals) - 1]
            return [float(row["people"][issue]) for row in scored]

        monkeypatch.setattr(flag_reading, "readout_scores", readout)
        people_table([model_dir], "described", references, reviews=len(rows))
        assert finals == [
            [json.loads(row["reference"])[issue] is True for row in train] for issue in ISSUES
        ]
        out = capsys.readouterr().out
        assert f"references of {len(train)} one- and two-star reviews" in out
        for issue in ISSUES:
            line = next(x for x in out.splitlines() if x.startswith(f"| {model_dir} | {issue} |"))
            cells = [cell.strip() for cell in line.split("|")[3:-1]]
            assert cells[2] == f"{flagged[issue]} of {count[issue]}", (issue, fold_score)
            others = len(scored) - count[issue]
            everything = fold_score < 0 and issue != ISSUES[0]
            assert cells[3] == f"{others if everything else 0} of {others}"
        line = next(x for x in out.splitlines() if "product_issue, not as delivery" in x)
        assert f"| {flagged['product_issue']} of {count['product_issue']} |" in line
