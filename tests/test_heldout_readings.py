"""The held-out split in the shares of the star groups and of the reviews that state a problem,
and how each eval logs the stars' agreement and the stated problems flagged."""

import json
import logging
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rewards import trl_component_functions, trl_reward_functions
from tasks.training.grpo_callbacks import LogSteps, heldout_eval
from tasks.training.heldout_readings import (
    agreement_words,
    balanced_agreement,
    ruled_out_flagged_share,
    stated_flagged_share,
    with_reading_counts,
)
from tasks.training.stopping import HeldoutEval
from tasks.training.train import _shares_of, split_heldout


def _review(index: int, stars: int, text: str = "") -> dict[str, Any]:
    return {
        "task": "extraction",
        "prompt_id": f"r{index}",
        "review_score": stars,
        "review_text": text,
    }


def _question(index: int) -> dict[str, Any]:
    return {"task": "sql_qa", "prompt_id": f"q{index}", "review_score": None}


def test_the_heldout_reviews_hold_each_star_group_in_its_share_from_the_end() -> None:
    # cpu_smol's skew: more one-star reviews than five-star ones.
    rows = [_review(i, 5) for i in range(10)] + [_review(10 + i, 1) for i in range(20)]
    kept, heldout = split_heldout(rows, 6)
    assert Counter(row["review_score"] for row in heldout) == {1: 4, 5: 2}
    assert [row["prompt_id"] for row in heldout] == ["r8", "r9", "r26", "r27", "r28", "r29"]
    assert len(kept) == 24 and not {r["prompt_id"] for r in kept} & {
        r["prompt_id"] for r in heldout
    }


def test_reviews_that_state_a_problem_are_held_out_in_their_share() -> None:
    # A third of the one-star reviews say the order never came; drawn from the end alone, the
    # held-out reviews would state none.
    stated = [_review(i, 1, "Não recebi o produto até hoje") for i in range(10)]
    silent = [_review(10 + i, 1, "Comprei para minha mãe") for i in range(20)]
    _, heldout = split_heldout(stated + silent, 6)
    assert sorted(row["prompt_id"] for row in heldout) == ["r26", "r27", "r28", "r29", "r8", "r9"]


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=8),
    fraction=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
)
def test_a_count_is_dealt_over_groups_in_proportion_to_their_sizes(
    sizes: list[int], fraction: float
) -> None:
    total = sum(sizes)
    count = int(fraction * total)
    dealt = _shares_of(dict(enumerate(sizes)), count)
    assert sum(dealt.values()) == count
    for group, size in enumerate(sizes):
        assert 0 <= dealt[group] <= size
        assert abs(dealt[group] - count * size / total) < 1


def test_each_task_keeps_its_count_among_the_last_prompts() -> None:
    rows = [_review(i, 1 + i % 5) for i in range(30)] + [
        row for i in range(10) for row in (_question(i), _review(30 + i, 1))
    ]
    _, heldout = split_heldout(rows, 8)
    assert Counter(row["task"] for row in heldout) == {"sql_qa": 4, "extraction": 4}
    assert [row["prompt_id"] for row in heldout if row["task"] == "sql_qa"] == [
        "q6",
        "q7",
        "q8",
        "q9",
    ]
    assert split_heldout(rows, 0) == (rows, [])
    with pytest.raises(ValueError, match="heldout_prompts=50 leaves no train prompts of 50"):
        split_heldout(rows, 50)


def _answer(sentiment: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": json.dumps({"sentiment": sentiment})}]


@pytest.mark.parametrize("functions", [trl_reward_functions, trl_component_functions])
def test_the_first_extraction_function_logs_the_counts_once_a_batch(functions) -> None:
    wrapped = with_reading_counts(functions())
    logged: list[tuple[str, float]] = []
    said = ["negativo", "negativo", "positivo", "negativo", "neutro", "positivo"]
    stars = [1, 2, 5, 4, 3, None]
    tasks = ["extraction"] * 5 + ["sql_qa"]
    columns = {
        "review_score": stars,
        "log_metric": lambda name, value: logged.append((name, value)),
    }
    totals = [f([_answer(s) for s in said], tasks, **columns) for f in wrapped]
    plain = [f([_answer(s) for s in said], tasks, review_score=stars) for f in functions()]
    assert totals == plain  # the scores are the reward's own
    assert [f.__name__ for f in wrapped] == [f.__name__ for f in functions()]
    assert logged == [
        ("stars_negativo/agreed", 2),
        ("stars_negativo/reviews", 2),
        ("stars_positivo/agreed", 1),
        ("stars_positivo/reviews", 2),
        ("stated_problems/flagged", 0),
        ("stated_problems/stated", 0),
        ("ruled_out_problems/flagged", 0),
        ("ruled_out_problems/ruled_out", 0),
    ]
    # TRL averages each metric over a log's batches and prefixes eval's with "eval_".
    logs = {f"eval_{name}": value for name, value in logged}
    assert balanced_agreement(logs) == pytest.approx((1.0 + 0.5) / 2)


def test_each_batch_logs_the_stated_problems_and_how_many_the_answers_flag() -> None:
    """Three seeds of cpu_smol turned the delivery flag off for every review while their held-out
    reward rose: the count of stated problems flagged is what shows it."""
    wrapped = with_reading_counts(trl_reward_functions())
    logged: dict[str, float] = {}
    reviews = [
        ("Não recebi o produto e o vendedor não responde", {"delivery_issue": True}),
        ("Veio quebrado", {"product_issue": True}),
        ("Chegou antes do prazo, adorei", {"delivery_issue": True}),
        ("Ainda não chegou", {"delivery_issue": False}),
    ]
    answers = [
        [{"role": "assistant", "content": json.dumps({"sentiment": "negativo", **flags})}]
        for _, flags in reviews
    ]
    wrapped[0](
        answers,
        ["extraction"] * len(reviews),
        review_score=[1, 1, 5, 1],
        review_text=[text for text, _ in reviews],
        gold_delivered_late=[None, False, False, None],
        log_metric=logged.__setitem__,
    )
    # Stated: delivery and seller, product, none (praise), delivery; flagged: delivery, product.
    assert logged["stated_problems/stated"] == 4
    assert logged["stated_problems/flagged"] == 2
    logs = {f"eval_{name}": value for name, value in logged.items()}
    assert stated_flagged_share(logs) == 0.5
    assert stated_flagged_share({"eval_reward": 0.6}) is None
    # Ruled out: the deliveries of the second and third orders, which came on time, and the
    # praise's product and seller; its answer flags its delivery all the same.
    assert (logged["ruled_out_problems/ruled_out"], logged["ruled_out_problems/flagged"]) == (4, 1)
    assert ruled_out_flagged_share(logs) == 0.25
    assert ruled_out_flagged_share({"eval_reward": 0.6}) is None
    assert agreement_words(logs).endswith(
        ", stated problems flagged 50%, ruled out problems flagged 25%"
    )


def test_a_constant_answer_reads_half_whatever_the_mix() -> None:
    logs = {
        "eval_stars_negativo/agreed": 9.0,
        "eval_stars_negativo/reviews": 9.0,
        "eval_stars_positivo/agreed": 0.0,
        "eval_stars_positivo/reviews": 4.0,
    }
    assert balanced_agreement(logs) == 0.5
    assert balanced_agreement({**logs, "eval_stars_positivo/reviews": 0.0}) == 1.0
    assert balanced_agreement({"eval_reward": 0.6}) is None


STEP_LOGS = {"reward": 0.5, "learning_rate": 2e-4}


@pytest.mark.parametrize(
    ("logs", "said"),
    [
        # A training step (TRL logs train metrics unprefixed): one side lost, shown at once.
        (
            {
                **STEP_LOGS,
                "stars_negativo/agreed": 1.0,
                "stars_negativo/reviews": 8.0,
                "stars_positivo/agreed": 8.0,
                "stars_positivo/reviews": 8.0,
            },
            "sentiment as the stars say: 1-2 stars 12%, 4-5 stars 100%",
        ),
        # A step that drew no high-star review names the group it judged.
        (
            {**STEP_LOGS, "stars_negativo/agreed": 4.0, "stars_negativo/reviews": 4.0},
            "sentiment as the stars say: 1-2 stars 100%",
        ),
        # No review answered (SQL only, or only 3-star reviews): the line as before.
        ({**STEP_LOGS, "stars_negativo/reviews": 0.0}, None),
    ],
)
def test_each_step_line_says_how_its_samples_read_the_stars(caplog, logs, said) -> None:
    state = SimpleNamespace(global_step=2, max_steps=4)
    with caplog.at_level(logging.INFO, logger="tucano.train"):
        LogSteps().on_log(None, state, None, logs=logs)
    (line,) = caplog.messages
    assert line.startswith("step 2/4 reward 0.500")
    assert (said in line) if said else ("stars" not in line)


def test_each_eval_line_says_how_the_heldout_answers_read_the_stars(caplog) -> None:
    logs = {
        "eval_reward": 0.72,
        "eval_stars_negativo/agreed": 6.0,
        "eval_stars_negativo/reviews": 6.0,
        "eval_stars_positivo/agreed": 2.5,
        "eval_stars_positivo/reviews": 5.0,
    }
    with caplog.at_level(logging.INFO, logger="tucano.train"):
        LogSteps().on_log(None, SimpleNamespace(global_step=4, max_steps=4), None, logs=logs)
    assert caplog.messages == [
        "eval at step 4: held-out reward 0.7200, entropy nan, "
        "sentiment as the stars say: 1-2 stars 100%, 4-5 stars 50%"
    ]


def test_task_shares_hold_out_each_task_in_its_share() -> None:
    rows = [_review(i, 1 + i % 5) for i in range(30)] + [_question(i) for i in range(10)]
    _, heldout = split_heldout(rows, 8, {"extraction": 0.5, "sql_qa": 0.5})
    assert Counter(row["task"] for row in heldout) == {"sql_qa": 4, "extraction": 4}
    _, as_in_the_file = split_heldout(rows, 8)
    assert Counter(row["task"] for row in as_in_the_file) == {"sql_qa": 8}  # the last eight


@pytest.mark.parametrize(
    ("means", "said"),
    [
        ({"extraction": 0.749, "insights": 0.535}, " (extraction 0.749, insights 0.535)"),
        ({"extraction": 0.749}, ""),  # one task: the mean is its own
        ({"extraction": 0.749, "sql_qa": None}, ""),  # no held-out prompt of the task
    ],
)
def test_each_eval_line_says_each_trained_task_s_heldout_reward(caplog, means, said) -> None:
    logs = {"eval_reward": 0.642, "eval_rewards/extraction_json/mean": 0.9}
    logs |= {f"eval_rewards/{task}_reward/mean": value for task, value in means.items()}
    with caplog.at_level(logging.INFO, logger="tucano.train"):
        LogSteps().on_log(None, SimpleNamespace(global_step=6, max_steps=6), None, logs=logs)
    assert caplog.messages == [f"eval at step 6: held-out reward 0.6420{said}, entropy nan"]


def test_an_eval_log_reads_as_the_stop_rules_record_of_it() -> None:
    logs = {
        "eval_reward": 0.6,
        "eval_entropy": 1.2,
        "eval_completions/clipped_ratio": 0.125,
        "eval_stars_negativo/agreed": 3.0,
        "eval_stars_negativo/reviews": 4.0,
        "eval_stars_positivo/agreed": 2.0,
        "eval_stars_positivo/reviews": 2.0,
        "eval_stated_problems/flagged": 2.0,
        "eval_stated_problems/stated": 4.0,
        "eval_ruled_out_problems/flagged": 1.0,
        "eval_ruled_out_problems/ruled_out": 4.0,
        "eval_rewards/extraction_reward/mean": 0.8,
        "eval_rewards/insights_reward/mean": 0.4,
        "eval_rewards/push_reward/mean": None,  # no held-out prompt of that task
        "eval_untrained/sql_qa": 0.3,
    }
    assert heldout_eval(6, logs) == HeldoutEval(
        step=6,
        reward=0.6,
        entropy=1.2,
        truncated=0.125,
        agreement=(0.75 + 1.0) / 2,
        stated_flagged=0.5,
        ruled_out_flagged=0.25,
        task_means={"extraction": 0.8, "insights": 0.4},
        untrained={"sql_qa": 0.3},
    )
    # One trained task: its mean is the held-out reward, and nothing of the other kinds.
    alone = heldout_eval(2, {"eval_reward": 0.5, "eval_rewards/extraction_reward/mean": 0.5})
    assert alone == HeldoutEval(step=2, reward=0.5)


def _summary_prompt(index: int, table: str) -> dict[str, Any]:
    return {"task": "insights", "prompt_id": f"i{index}", "data_summary": table}


def test_a_held_out_summary_is_trained_under_no_other_focus() -> None:
    # Each table asked twice, with two focuses: the held-out prompts' tables leave training too.
    rows = [_summary_prompt(i, f"| tabela {i % 10} |") for i in range(20)]
    kept, heldout = split_heldout(rows, 4)
    held_tables = {row["data_summary"] for row in heldout}
    assert len(heldout) == 4 and len(held_tables) == 4
    assert not held_tables & {row["data_summary"] for row in kept}
    assert len(kept) == 20 - 2 * 4


def test_holding_out_every_input_is_an_error_naming_the_setting() -> None:
    rows = [_summary_prompt(i, "| a mesma tabela |") for i in range(5)]
    with pytest.raises(ValueError, match=r"heldout_prompts=1 holds out the input of every one"):
        split_heldout(rows, 1)
