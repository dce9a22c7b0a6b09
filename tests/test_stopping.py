"""Early stopping and the entropy-collapse guard, on the seed's own failure shape."""

import pytest

from configs.recipe import CONFIG_DIR, load_recipe
from tasks.training.stopping import HeldoutEval, StopRules
from tasks.training.train import stop_rules


def test_keeps_the_peak_and_stops_after_patience() -> None:
    # Eval every 50 steps; reward peaks at step 1100 then collapses, as in the V4.2 run.
    rules = StopRules(patience=3)
    rewards = {1000: 0.60, 1050: 0.62, 1100: 0.634, 1150: 0.55, 1200: 0.30, 1250: 0.10}
    for step, reward in rewards.items():
        rules.observe(HeldoutEval(step, reward, entropy=None))
        if rules.stop_reason:
            break
    assert (rules.best_step, rules.best_reward) == (1100, 0.634)
    assert step == 1250 and "early stopping" in rules.stop_reason


def test_a_gain_below_min_improvement_does_not_reset_patience() -> None:
    rules = StopRules(patience=2, min_improvement=0.01)
    assert rules.observe(HeldoutEval(1, 0.5, None))
    assert not rules.observe(HeldoutEval(2, 0.505, None))
    assert not rules.observe(HeldoutEval(3, 0.509, None))
    assert rules.best_step == 1 and rules.stop_reason


@pytest.mark.parametrize(
    ("entropies", "stops_at"),
    [
        ([2.0, 1.9, 0.5, 0.4, 0.3], 3),  # below 0.3 x 2.0 at the 3rd and 4th evals
        ([2.0, 0.5, 1.5, 0.5, 1.5], None),  # dips that recover are not collapse
    ],
)
def test_entropy_guard(entropies: list[float], stops_at: int | None) -> None:
    rules = StopRules(patience=100, entropy_fraction=0.3, entropy_evals=2)
    stopped = None
    for index, entropy in enumerate(entropies):
        rules.observe(
            HeldoutEval(index, reward=float(index), entropy=entropy)
        )  # reward keeps improving
        if rules.stop_reason and stopped is None:
            stopped = index
    assert stopped == stops_at
    if stops_at is not None:
        assert "entropy collapse" in rules.stop_reason


def test_an_entropy_guard_given_no_entropy_says_it_is_blind() -> None:
    # Unsloth's GRPO computes no entropies: the first GPU run (an H200) logged "entropy nan" at
    # every eval, and a nan start made every later comparison false, so the guard could never
    # fire and the run's record said nothing of it.
    rules = StopRules(patience=100, entropy_fraction=0.3, entropy_evals=2)
    for step in range(4):
        rules.observe(HeldoutEval(step, reward=float(step), entropy=float("nan")))
    assert rules.stop_reason is None and rules.entropy_unmeasured
    assert rules.outcome().startswith("max_steps reached; entropy guard blind")
    measured = StopRules(patience=100, entropy_fraction=0.3)
    measured.observe(HeldoutEval(0, reward=0.5, entropy=2.0))
    assert measured.outcome() == "max_steps reached"
    unguarded = StopRules(patience=100)
    unguarded.observe(HeldoutEval(0, reward=0.5, entropy=float("nan")))
    assert unguarded.outcome() == "max_steps reached"


def test_state_round_trips_and_decides_the_same() -> None:
    first = StopRules(patience=3, entropy_fraction=0.5)
    for step, (reward, entropy) in enumerate([(0.1, 2.0), (0.3, 1.8), (0.2, 1.0)]):
        first.observe(HeldoutEval(step, reward, entropy))
    second = StopRules.from_state_dict(first.state_dict())
    assert second == first
    for step, (reward, entropy) in enumerate([(0.25, 0.9), (0.2, 0.8)], start=3):
        first.observe(HeldoutEval(step, reward, entropy))
        second.observe(HeldoutEval(step, reward, entropy))
    assert second == first and first.stop_reason


def test_fresh_state_serialises_without_infinity() -> None:
    assert StopRules(patience=1).state_dict()["best_reward"] is None


@pytest.mark.parametrize(
    ("evals", "best_step"),
    [
        # (step, held-out reward, share of held-out answers cut at the token limit)
        pytest.param(
            [(0, 0.62, 0.0), (10, 0.66, 0.5), (20, 0.64, 0.1)], 20, id="a cut-off gain loses"
        ),
        pytest.param([(0, 0.62, 0.0), (10, 0.66, 0.2)], 10, id="at the limit counts"),
        pytest.param([(0, 0.62, 0.4), (10, 0.60, 0.1)], 10, id="the first within wins"),
        pytest.param([(0, 0.62, 0.4), (10, 0.64, 0.4)], 10, id="none within, cut alike: reward"),
        pytest.param([(0, 0.62, 0.4), (10, 0.60, 0.3)], 10, id="none within: fewer cut wins"),
        pytest.param([(0, 0.62, None), (10, 0.66, 0.9)], 0, id="unmeasured counts as within"),
    ],
)
def test_an_adapter_whose_answers_run_to_the_limit_is_not_best(
    evals: list[tuple[int, float, float | None]], best_step: int
) -> None:
    rules = StopRules(patience=10, max_truncated=0.2)
    for step, reward, truncated in evals:
        rules.observe(HeldoutEval(step, reward, None, truncated))
    assert rules.best_step == best_step
    assert StopRules.from_state_dict(rules.state_dict()) == rules


def test_a_start_just_beyond_the_limit_is_kept_over_answers_that_loop() -> None:
    # SmolLM2 SQL after SFT, 8 held-out questions at cpu_smol's limit of 10%: one answer cut at
    # the start is already beyond it, and GRPO at 5e-4 then raised the held-out reward by looping.
    rules = StopRules(patience=10, min_improvement=0.005, max_truncated=0.1)
    for step, reward, truncated in [(0, 0.296, 0.125), (5, 0.306, 0.75), (10, 0.394, 1.0)]:
        rules.observe(HeldoutEval(step, reward, None, truncated))
    rules = StopRules.from_state_dict(rules.state_dict())
    assert not rules.observe(HeldoutEval(20, 0.485, None, 0.875))
    assert rules.best_step == 0
    assert rules.observe(HeldoutEval(25, 0.47, None, 0.0))


def test_without_a_truncation_limit_reward_alone_decides() -> None:
    rules = StopRules(patience=10)
    for step, reward, truncated in [(0, 0.62, 0.0), (10, 0.66, 1.0)]:
        rules.observe(HeldoutEval(step, reward, None, truncated))
    assert rules.best_step == 10


@pytest.mark.parametrize(
    ("evals", "best_step"),
    [
        # (step, held-out reward, the sentiments' agreement with the stars)
        pytest.param(
            [(0, 0.650, 0.82), (10, 0.688, 0.50)], 0, id="one sentiment to all is not kept"
        ),
        pytest.param([(0, 0.65, 0.82), (10, 0.66, 0.875)], 10, id="reading them better counts"),
        pytest.param([(0, 0.65, 0.82), (10, 0.66, 0.82)], 10, id="as well as the start counts"),
        pytest.param(
            [(0, 0.65, 0.82), (10, 0.66, 0.9), (20, 0.70, 0.6)], 10, id="a later drop is not"
        ),
        pytest.param([(0, 0.65, None), (10, 0.66, 0.5)], 10, id="no judged review: reward"),
    ],
)
def test_an_adapter_that_reads_the_stars_worse_than_its_start_is_not_best(
    evals: list[tuple[int, float, float | None]], best_step: int
) -> None:
    rules = StopRules(patience=10)
    for step, reward, agreement in evals:
        rules.observe(HeldoutEval(step, reward, None, agreement=agreement))
    assert rules.best_step == best_step
    assert StopRules.from_state_dict(rules.state_dict()) == rules


@pytest.mark.parametrize(
    ("drop", "agreement", "kept"),
    [
        # The start read both star groups right (100%); the held-out 16 hold 5-6 of each group.
        pytest.param(0.1, 0.9, True, id="one of five 4-5 star reviews read otherwise"),
        pytest.param(0.1, (5 / 6 + 4 / 5) / 2, False, id="one review in each group"),
        pytest.param(0.1, 0.5, False, id="one sentiment to all"),
        pytest.param(0.0, 0.9, False, id="no tolerance: any drop"),
    ],
)
def test_a_drop_within_the_tolerance_is_kept_and_one_beyond_it_is_not(
    drop: float, agreement: float, kept: bool
) -> None:
    rules = StopRules(patience=10, max_agreement_drop=drop)
    rules.observe(HeldoutEval(0, 0.742, None, agreement=1.0))
    assert rules.observe(HeldoutEval(4, 0.817, None, agreement=agreement)) is kept
    assert rules.best_step == (4 if kept else 0)
    assert StopRules.from_state_dict(rules.state_dict()) == rules


@pytest.mark.parametrize(
    ("drop", "flagging", "kept"),
    [
        # cpu_smol's worse seeds flagged 1-20 of the 51 eval delivery complaints the start
        # flagged 47 of; the 16 held-out reviews state four to six problems.
        pytest.param(0.25, 0.0, False, id="a flag turned off for every review"),
        pytest.param(0.25, 0.75, True, id="one stated problem of four missed"),
        pytest.param(0.25, 0.5, False, id="two of four missed"),
        pytest.param(None, 0.0, True, id="not checked"),
        pytest.param(0.0, 1.0, True, id="flagging more is never refused"),
    ],
)
def test_an_adapter_that_flags_fewer_stated_problems_than_its_start_is_not_best(
    drop: float | None, flagging: float, kept: bool
) -> None:
    rules = StopRules(patience=10, max_flagging_drop=drop)
    rules.observe(HeldoutEval(0, 0.70, None, stated_flagged=1.0))
    rules = StopRules.from_state_dict(rules.state_dict())
    assert rules.observe(HeldoutEval(2, 0.78, None, stated_flagged=flagging)) is kept
    assert rules.best_step == (2 if kept else 0)
    # No stated problem held out: nothing to hold the step to.
    assert not rules.breaches(HeldoutEval(3, 0.78, stated_flagged=None))


def test_the_stars_outrank_the_truncation_limit_and_survive_a_resume() -> None:
    # A start beyond the cut limit stays best over an eval within it that reads the stars worse.
    rules = StopRules(patience=10, max_truncated=0.1)
    rules.observe(HeldoutEval(0, 0.60, None, truncated=0.2, agreement=0.8))
    rules = StopRules.from_state_dict(rules.state_dict())
    assert not rules.observe(HeldoutEval(10, 0.70, None, truncated=0.0, agreement=0.7))
    assert rules.best_step == 0 and rules.start.agreement == 0.8
    assert rules.observe(HeldoutEval(20, 0.70, None, truncated=0.0, agreement=0.8))


def test_the_smol_recipe_keeps_a_step_that_read_one_review_otherwise_and_refuses_a_swing() -> None:
    """cpu_smol's first run with every weight trained in SFT: seed 42's step 4 gained held-out
    reward 0.742 -> 0.817 and read one of five 4-5 star reviews otherwise (100% -> 90%)."""
    training = load_recipe(CONFIG_DIR / "cpu_smol.yaml").training
    for agreement, kept in [(0.9, True), (0.5, False)]:
        rules = stop_rules(training)
        rules.observe(HeldoutEval(0, 0.742, None, 0.0, agreement=1.0))
        assert rules.observe(HeldoutEval(4, 0.817, None, 0.0, agreement=agreement)) is kept


@pytest.mark.parametrize(
    ("untrained", "worse"),
    [
        pytest.param({"insights": 0.70, "push": 0.96}, set(), id="as at the start"),
        pytest.param({"insights": 0.69, "push": 0.96}, set(), id="a drop of the tolerance"),
        pytest.param({"insights": 0.62, "push": 0.96}, {"insights"}, id="insights worse"),
        pytest.param({"insights": 0.75, "push": 0.90}, {"push"}, id="one worse, one better"),
        pytest.param({}, set(), id="an eval that answered no untrained task"),
    ],
)
def test_a_step_that_makes_an_untrained_task_worse_is_not_best(
    untrained: dict[str, float], worse: set[str]
) -> None:
    """The tiny default's seed 456: its step 40 gained on held-out extraction (0.656 -> 0.674) and
    made insights, which it does not train, significantly worse on the eval split."""
    rules = StopRules(patience=10, max_untrained_drop=0.01)
    rules.observe(HeldoutEval(0, 0.656, None, untrained={"insights": 0.70, "push": 0.96}))
    breaches = rules.breaches(HeldoutEval(40, 0.674, untrained=untrained))
    assert {breach.measure.split()[3].rstrip(",") for breach in breaches} == worse
    assert rules.observe(HeldoutEval(40, 0.674, None, untrained=untrained)) is (not worse)
    assert rules.best_step == (0 if worse else 40)
    assert StopRules.from_state_dict(rules.state_dict()) == rules


@pytest.mark.parametrize(
    ("rise", "ruled_out_flagged", "kept"),
    [
        # The SFT model flagged the delivery on 7 of 48 eval reviews whose order came on time; a
        # seed trained on extraction and insights on 47 of them.
        pytest.param(0.25, 47 / 48, False, id="a flag turned on for every complaint"),
        pytest.param(0.25, 0.30, True, id="within the tolerance"),
        pytest.param(0.25, 0.0, True, id="fewer false alarms are never refused"),
        pytest.param(None, 1.0, True, id="not checked"),
    ],
)
def test_an_adapter_that_flags_what_the_reviews_rule_out_more_than_its_start_is_not_best(
    rise: float | None, ruled_out_flagged: float, kept: bool
) -> None:
    rules = StopRules(patience=10, max_ruled_out_rise=rise, max_flagging_drop=0.25)
    rules.observe(HeldoutEval(0, 0.70, stated_flagged=0.8, ruled_out_flagged=7 / 48))
    rules = StopRules.from_state_dict(rules.state_dict())
    # It flags every stated problem too: a flag on for all is no loss there.
    assert (
        rules.observe(HeldoutEval(2, 0.78, stated_flagged=1.0, ruled_out_flagged=ruled_out_flagged))
        is kept
    )
    assert rules.best_step == (2 if kept else 0)


@pytest.mark.parametrize(
    ("task_means", "worse"),
    [
        # A cpu_smol seed trained on extraction and insights: its held-out mean rose while its
        # extraction fell 0.851 -> 0.749.
        pytest.param({"extraction": 0.749, "insights": 0.535}, {"extraction"}, id="one falls"),
        pytest.param({"extraction": 0.83, "insights": 0.50}, set(), id="within the tolerance"),
        pytest.param({"extraction": 0.90, "insights": 0.45}, set(), id="both gain"),
    ],
)
def test_a_step_that_makes_one_trained_task_worse_is_not_best_whatever_the_mean(
    task_means: dict[str, float], worse: set[str]
) -> None:
    rules = StopRules(patience=10, max_task_drop=0.05)
    start = {"extraction": 0.851, "insights": 0.341}
    rules.observe(HeldoutEval(0, sum(start.values()) / 2, task_means=start))
    rules = StopRules.from_state_dict(rules.state_dict())
    held = HeldoutEval(6, sum(task_means.values()) / 2, task_means=task_means)
    assert {breach.key for breach in rules.breaches(held)} == worse
    assert rules.observe(held) is (not worse)
    assert StopRules(patience=10).breaches(held) == []  # not checked by default


def test_a_refused_step_says_what_moved_from_the_start_and_which_setting_refused_it() -> None:
    rules = StopRules(patience=10, max_ruled_out_rise=0.25, max_task_drop=0.05)
    rules.observe(
        HeldoutEval(0, 0.6, ruled_out_flagged=0.15, task_means={"extraction": 0.851, "sql_qa": 0.3})
    )
    held = HeldoutEval(
        6, 0.7, ruled_out_flagged=0.98, task_means={"extraction": 0.749, "sql_qa": 0.6}
    )
    assert [breach.words(6) for breach in rules.breaches(held)] == [
        "step 6 is not kept: its held-out answers flag the problems the reviews rule out 98%, "
        "the start's 15%, beyond training.max_ruled_out_flagging_rise (0.25)",
        "step 6 is not kept: it scores on extraction, a task it trains, 0.7490, the start's "
        "0.8510, beyond training.max_task_drop (0.05)",
    ]
