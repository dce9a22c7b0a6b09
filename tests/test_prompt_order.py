"""The stratified prompt order: every step a cross-section of the split, every row once a pass,
and reviews that state a problem at the share the recipe asks for."""

from collections import Counter

import pytest
from pydantic import ValidationError

from configs.recipe import TrainingConfig
from tasks.training.prompt_order import stratified_stream, stratum

COMPLAINT = "O produto não chegou, atrasou muito."
QUIET = "Ok."


def _rows(counts: dict[tuple[str, int | None, str | None], int]) -> list[dict]:
    rows = []
    for (task, stars, text), count in counts.items():
        rows += [
            {
                "id": len(rows) + i,
                "task": task,
                "review_score": stars,
                "review_text": text,
                "gold_delivered_late": None,
            }
            for i in range(count)
        ]
    return rows


# cpu_smol's extraction train split is about 53% one- and two-star reviews, 39% four- and
# five-star, 8% three-star.
SPLIT = {("extraction", 1, QUIET): 160, ("extraction", 5, QUIET): 120, ("extraction", 3, QUIET): 24}


def test_a_pass_holds_every_row_once() -> None:
    rows = _rows(SPLIT)
    ids = sorted(row["id"] for row in stratified_stream(rows, "7", len(rows)))
    assert ids == list(range(len(rows)))


@pytest.mark.parametrize("prefix", [4, 8, 24, 100, 303])
def test_every_prefix_holds_each_stratum_within_one_row_of_its_share(prefix: int) -> None:
    rows = _rows(SPLIT)
    shares = Counter(stratum(row) for row in rows)
    taken = Counter(stratum(row) for row in stratified_stream(rows, "7", prefix))
    for key, count in shares.items():
        assert abs(taken[key] - prefix * count / len(rows)) < 1, key


def test_no_step_of_four_is_one_star_group_alone() -> None:
    # A shuffle of this split makes about one step in ten of one star group alone.
    order = stratified_stream(_rows(SPLIT), "42", 300)
    steps = [order[i : i + 4] for i in range(0, 300, 4)]
    assert all(len({stratum(row) for row in step}) > 1 for step in steps)


def test_tasks_are_strata_too() -> None:
    rows = _rows(
        {("extraction", 1, QUIET): 30, ("extraction", 5, QUIET): 30, ("sql_qa", None, None): 60}
    )
    order = stratified_stream(rows, "1", 120)
    assert [Counter(row["task"] for row in order[i : i + 4]) for i in range(0, 120, 4)] == [
        Counter({"extraction": 2, "sql_qa": 2})
    ] * 30


def test_the_order_is_the_seed_s() -> None:
    rows = _rows(SPLIT)
    ids = [[row["id"] for row in stratified_stream(rows, seed, 50)] for seed in ("1", "1", "2")]
    assert ids[0] == ids[1] != ids[2]


def test_a_stream_goes_on_into_new_shuffles_of_each_stratum() -> None:
    rows = _rows({("extraction", 1, QUIET): 6, ("extraction", 5, QUIET): 4})
    stream = [row["id"] for row in stratified_stream(rows, "3", 25)]
    assert sorted(stream[:10]) == sorted(stream[10:20]) == list(range(10))
    assert stream[:10] != stream[10:20]


def test_reviews_that_state_a_problem_get_their_share_of_each_star_group_s_task() -> None:
    # One complaint in five, asked for at half the reviews: 60 of 120 prompts, and the star
    # groups keep their shares (one- and two-star 2/3) within both halves.
    rows = _rows(
        {
            ("extraction", 1, COMPLAINT): 20,
            ("extraction", 1, QUIET): 60,
            ("extraction", 5, QUIET): 40,
            ("sql_qa", None, None): 100,
        }
    )
    stream = stratified_stream(rows, "5", 220, stated_share=0.5)
    by_text = Counter(row["review_text"] for row in stream if row["task"] == "extraction")
    assert by_text == {COMPLAINT: 60, QUIET: 60}
    assert Counter(row["review_score"] for row in stream if row["review_text"] == QUIET) == {
        1: 36,
        5: 24,
    }
    assert Counter(row["task"] for row in stream) == {"extraction": 120, "sql_qa": 100}
    # Twenty complaints dealt sixty times: each three times, a new shuffle each round.
    complaints = [row["id"] for row in stream if row["review_text"] == COMPLAINT]
    assert Counter(complaints) == dict.fromkeys(range(20), 3)


def test_a_stated_share_with_nothing_stated_is_refused_by_name() -> None:
    rows = _rows(SPLIT)
    with pytest.raises(ValueError, match=r"stated_share=0.5.*extraction.*states a problem"):
        stratified_stream(rows, "5", 10, stated_share=0.5)


def test_a_stated_share_without_strata_is_refused_by_name() -> None:
    with pytest.raises(ValidationError, match=r"stated_share=0.5.*prompt_order: stratified"):
        TrainingConfig(stated_share=0.5)


def test_a_longer_stream_begins_with_the_shorter_one() -> None:
    # The refill stream is dealt once and extended on this property.
    rows = _rows(
        {("extraction", 1, COMPLAINT): 5, ("extraction", 1, QUIET): 9, ("extraction", 5, QUIET): 7}
    )
    short = [row["id"] for row in stratified_stream(rows, "9", 30, stated_share=0.5)]
    long = [row["id"] for row in stratified_stream(rows, "9", 97, stated_share=0.5)]
    assert long[:30] == short


def test_task_shares_deal_each_step_whatever_the_split_holds() -> None:
    # Insights a tenth of the split, asked for at half of every step: each step of four holds
    # two, the extraction half keeps its stated share and its star groups theirs.
    rows = _rows(
        {
            ("extraction", 1, COMPLAINT): 40,
            ("extraction", 1, QUIET): 80,
            ("extraction", 5, QUIET): 60,
            ("insights", None, None): 20,
        }
    )
    shares = {"extraction": 0.5, "insights": 0.5}
    stream = stratified_stream(rows, "4", 80, stated_share=0.5, task_shares=shares)
    assert [Counter(row["task"] for row in stream[i : i + 4]) for i in range(0, 80, 4)] == [
        Counter({"extraction": 2, "insights": 2})
    ] * 20
    extraction = [row for row in stream if row["task"] == "extraction"]
    assert Counter(row["review_text"] for row in extraction) == {COMPLAINT: 20, QUIET: 20}
    # Twenty insights prompts met twice each, a new shuffle each round.
    insights = [row["id"] for row in stream if row["task"] == "insights"]
    assert Counter(insights) == dict.fromkeys(set(insights), 2) and len(set(insights)) == 20
    # Without task shares, insights keep their tenth.
    plain = stratified_stream(rows, "4", 80, stated_share=0.5)
    assert Counter(row["task"] for row in plain)["insights"] == 8


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"task_shares": {"extraction": 1.0}}, r"task_shares=.*prompt_order: stratified"),
        (
            {"prompt_order": "stratified", "tasks": ["extraction", "insights"],
             "task_shares": {"extraction": 1.0}},
            r"task_shares names \['extraction'\].*training.tasks \['extraction', 'insights'\]",
        ),
        (
            {"prompt_order": "stratified", "tasks": ["extraction", "insights"],
             "task_shares": {"extraction": 0.6, "insights": 0.6}},
            r"task_shares=.*adding up to 1",
        ),
    ],
)  # fmt: skip
def test_task_shares_that_cannot_deal_the_trained_tasks_are_refused_by_name(
    settings: dict, message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        TrainingConfig(**settings)
