"""benchmarks/flag_reading.py's readouts: a logistic readout finds a flag the words settle, and the
model's hidden states are read where it writes each flag."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.flag_reading import (
    PEOPLE_FITTED,
    PEOPLE_SCORED,
    low_star_extraction,
    people_sets,
    people_table,
    read_flags,
    read_review_id,
    readout_scores,
    split_auc,
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


def test_the_people_readouts_learn_from_the_dev_and_val_readings_and_are_scored_on_june(
    tmp_path: Path, capsys
) -> None:
    fitted, scored = people_sets("named")
    month = [json.loads(line) for line in PEOPLE_SCORED[0].read_text().splitlines()]
    # Each reading with its own review's prompt, as the person read it, and no review on both sides.
    assert [row["review_id"] for row in scored] == [reading["review_id"] for reading in month]
    assert [row["people"] for row in scored] == [
        {issue: reading[issue] is True for issue in ISSUES} for reading in month
    ]
    # The shipped data's review, as the person read it (title and message each stripped there).
    assert [row["review_text"].split() for row in scored] == [
        reading["review_text"].split() for reading in month
    ]
    earlier = [json.loads(line) for path in PEOPLE_FITTED for line in path.read_text().splitlines()]
    months = {reading["review_id"] for reading in month}
    read = [reading for reading in earlier if read_review_id(reading) not in months]
    assert len(read) < len(earlier)  # the earlier sets hold some of June's reviews
    assert [row["people"] for row in fitted] == [
        {issue: reading[issue] is True for issue in ISSUES} for reading in read
    ]
    assert not {row["review_id"] for row in fitted} & months

    store = ArtifactStore(tmp_path / "store")
    _, base = small_training_inputs(store)
    model_dir = store.get_dir(base.location, tmp_path / "model")
    people_table([model_dir], "named")
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[0]
        == f"readouts fitted on {len(read)} reviews people read, scored on {len(month)} others"
    )
    for issue in ISSUES:
        (line,) = [line for line in lines if f"| {issue} |" in line]
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        complaints = sum(reading[issue] is True for reading in month)
        assert cells[2] == f"{complaints} of {len(month)}"
        hits, of = (int(n) for n in cells[5].split(" of "))
        assert of == complaints and 0 <= hits <= complaints
        assert cells[6].endswith(f" of {len(month) - complaints}")
    assert sum(f"| {issue}, not as delivery |" in line for line in lines for issue in ISSUES) == 2
