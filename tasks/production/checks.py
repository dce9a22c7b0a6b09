"""What a reader of the analysis would judge, as checks with thresholds: the monitor's eyes.

The extraction reward is the audited training signal and stays as it is, but it is no reader: it
gives partial credit to JSON that is half there (an answer with repeated "summary" keys and no
sentiment_score earned 0.681), it cannot see an answer cut at the token budget, and an answer
that says "negativo" whatever the review loses only the contradiction penalty on positive ones.
A model whose answers were 29% parsed, 100% truncated and all "negativo" averaged 0.567, above
the 0.50 floor. So every analysed answer is also checked for:

- parsed: the 10 fields with valid values, by the extraction reward's own parser and typed
  checks (`parsed_fields`), so what the monitor counts as parsed is what the reward reads;
- truncated: cut at the token budget instead of ended;
- sentiment agreement: on 1-2 and 4-5 star reviews, the sentiment the stars call for;
- collapse: one value of sentiment or churn risk in most parsed answers while the stars of the
  same reviews are spread.

A rate's threshold is the stricter of the recipe's limit (`monitoring:`) and the same model's
value on its own eval split moved by `eval_margin`: a good model is held to what it showed, a
weak one at least to the limit. Collapse is measured against the stars of the same reviews
instead (the eval split's reviews have other stars: a happy month is not a collapse).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable
from typing import Any, NamedTuple

from configs.recipe import MonitoringConfig
from rewards.extraction import FIELDS, VALUE_CHECKS, parse_json_object
from rewards.review_evidence import STAR_GROUPS, star_sentiment
from tasks.evaluation.report import fmt
from tasks.evaluation.stats import settled

PASS, FAIL, NOT_MEASURED = "pass", "fail", "not measured"
# Both follow the stars in the reference answers, three values for three star groups.
COLLAPSE_LABELS = {
    "sentiment": "One sentiment for most answers",
    "churn_risk": "One churn risk for most answers",
}
# "Bom, mas..." is as much a 3-star review as a neutral one: its text, not its stars, says which
# way it leans, so agreement is judged on the other reviews only.
UNDECIDED_STARS = 3


def parsed_fields(completion: str) -> tuple[dict[str, Any] | None, str | None]:
    """The 10-field object when every field is there with a valid value; else None and why."""
    data, _ = parse_json_object(completion)
    if data is None:
        return None, "no JSON object in the completion"
    missing = [name for name in FIELDS if name not in data]
    if missing:
        return None, f"missing field(s): {', '.join(missing)}"
    invalid = [name for name in FIELDS if not VALUE_CHECKS[name](data[name])]
    if invalid:
        return None, f"invalid value(s): {', '.join(invalid)}"
    return {name: data[name] for name in FIELDS}, None


class Answer(NamedTuple):
    """What the checks read of one extraction answer."""

    parsed: dict[str, Any] | None
    parse_error: str | None
    truncated: bool | None  # None: its source does not say (offline logs)
    stars: int | None  # the review's own score, 1-5
    reward: float

    @classmethod
    def of(
        cls, completion: str, truncated: bool | None, stars: int | None, reward: float
    ) -> Answer:
        return cls(*parsed_fields(completion), truncated, stars, reward)


def eval_answers(eval_rows: list[dict[str, Any]], prompts: list[dict[str, Any]]) -> list[Answer]:
    """The model's extraction answers on its eval split, each with its review's stars."""
    stars = {prompt["prompt_id"]: prompt.get("review_score") for prompt in prompts}
    return [
        Answer.of(row["completion"], row["truncated"], stars[row["prompt_id"]], row["total"])
        for row in eval_rows
        if row["task"] == "extraction"
    ]


def _value(parsed: dict[str, Any], field: str) -> str:
    # As VALUE_CHECKS accepts them: " Positivo" is positivo.
    return str(parsed[field]).strip().lower()


def _share(flags: Iterable[bool]) -> float | None:
    values = list(flags)
    return sum(values) / len(values) if values else None


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


class Check(NamedTuple):
    check: str  # its name in the decision file
    label: str
    unit: str  # "share", "reward" or "p": how its numbers are written
    bound: str  # "at least" or "at most": which side of the threshold passes
    value: float | None
    threshold: float
    reference: float | None  # the same model's value on its eval split
    verdict: str
    reason: str


_NEEDS = {"at least": "needs at least", "at most": "allows at most"}


def _judged(value: float, threshold: float, bound: str) -> str:
    passes = value >= threshold if bound == "at least" else value <= threshold
    return PASS if passes else FAIL


def _threshold(
    limit: float, field: str, reference: float | None, margin: float, bound: str
) -> tuple[float, str]:
    """The recipe's limit, or the model's own eval-split value moved by `margin` where that is
    stricter; and where the threshold came from, in words."""
    if reference is not None:
        own = reference - margin if bound == "at least" else reference + margin
        if (own > limit) if bound == "at least" else (own < limit):
            side = "less" if bound == "at least" else "plus"
            return own, f"its eval split's {_percent(reference)} {side} eval_margin {margin:.0%}"
    return limit, f"monitoring.{field}"


def _rate(
    name: str,
    label: str,
    field: str,
    bound: str,
    measured: tuple[float | None, str],
    reference: float | None,
    config: MonitoringConfig,
) -> Check:
    value, what = measured
    threshold, source = _threshold(
        getattr(config, field), field, reference, config.eval_margin, bound
    )
    if value is None:
        return Check(name, label, "share", bound, None, threshold, reference, NOT_MEASURED, what)
    reason = f"{what}, {_NEEDS[bound]} {_percent(threshold)} ({source})"
    verdict = _judged(value, threshold, bound)
    return Check(name, label, "share", bound, value, threshold, reference, verdict, reason)


def _parse_rate(answers: list[Answer]) -> tuple[float | None, str]:
    value = _share(a.parsed is not None for a in answers)
    what = f"{_percent(value)} of {len(answers)} answers"
    errors = Counter(a.parse_error for a in answers if a.parsed is None)
    if errors:
        error, count = errors.most_common(1)[0]
        what += f" ({errors.total()} unparsed, {count} of them for {error})"
    return value, what


def _truncated(answers: list[Answer]) -> tuple[float | None, str]:
    known = [a.truncated for a in answers if a.truncated is not None]
    if not known:
        return None, 'no answer says whether it was cut ("truncated" unknown)'
    return _share(known), f"{_percent(_share(known))} of {len(known)} answers cut"


def _agreement(answers: list[Answer]) -> tuple[float | None, str]:
    """The mean of the agreement on 1-2 star and on 4-5 star reviews: a constant answer gets
    50% whatever the month's mix (pooled, "negativo" everywhere would agree with 63% of the
    shipped data's reviews, most of which are 1-2 stars)."""
    groups: dict[str, list[bool]] = {"negativo": [], "positivo": []}
    for a in answers:
        if a.parsed is not None and a.stars is not None and a.stars != UNDECIDED_STARS:
            expected = star_sentiment(a.stars)
            groups[expected].append(_value(a.parsed, "sentiment") == expected)
    judged = {group: flags for group, flags in groups.items() if flags}
    if not judged:
        return None, "no parsed answer on a 1-2 or 4-5 star review"
    value = statistics.fmean(_share(flags) for flags in judged.values())
    parts = " and ".join(
        f"{sum(flags)} of {len(flags)} answers on {STAR_GROUPS[group]} star reviews say {group}"
        for group, flags in judged.items()
    )
    return value, f"{_percent(value)}, the mean of: {parts}"


def _top_share(answers: list[Answer], field: str) -> tuple[float | None, str, float | None]:
    """The share of the field's most common value among parsed answers with known stars, what
    it is in words, and the share of the largest star group of the same reviews."""
    rated = [a for a in answers if a.parsed is not None and a.stars is not None]
    if not rated:
        return None, "no parsed answer on a review with known stars", None
    value, count = Counter(_value(a.parsed, field) for a in rated).most_common(1)[0]
    group, in_group = Counter(star_sentiment(a.stars) for a in rated).most_common(1)[0]
    share, spread = count / len(rated), in_group / len(rated)
    what = (
        f'{_percent(share)} of {len(rated)} parsed answers say "{value}", while the largest '
        f"star group ({STAR_GROUPS[group]} stars) is {_percent(spread)} of those reviews"
    )
    return share, what, spread


def _collapse(
    answers: list[Answer], reference: list[Answer] | None, field: str, config: MonitoringConfig
) -> Check:
    name, label, bound = f"collapse_{field}", COLLAPSE_LABELS[field], "at most"
    share, what, spread = _top_share(answers, field)
    reference_share = _top_share(reference, field)[0] if reference else None
    if share is None:
        threshold = config.max_value_share
        return Check(
            name, label, "share", bound, None, threshold, reference_share, NOT_MEASURED, what
        )
    threshold, source = config.max_value_share, "monitoring.max_value_share"
    from_stars = min(1.0, spread + config.stars_margin)
    if from_stars > threshold:
        threshold = from_stars
        source = f"the largest star group's {_percent(spread)} plus stars_margin"
        source += f" {config.stars_margin:.0%}"
    reason = f"{what}, {_NEEDS[bound]} {_percent(threshold)} ({source})"
    verdict = _judged(share, threshold, bound)
    return Check(name, label, "share", bound, share, threshold, reference_share, verdict, reason)


def _mean_reward(
    answers: list[Answer], reference: list[Answer] | None, config: MonitoringConfig
) -> Check:
    mean = statistics.fmean(a.reward for a in answers)
    reference_mean = statistics.fmean(a.reward for a in reference) if reference else None
    if mean < config.floor:
        verdict, reason = FAIL, f"mean reward {mean:.3f} is below the floor {config.floor:.2f}"
    else:
        verdict, reason = PASS, f"mean reward {mean:.3f} at or above the floor {config.floor:.2f}"
    return Check(
        "mean_reward", "Mean reward", "reward", "at least", mean, config.floor, reference_mean,
        verdict, reason,
    )  # fmt: skip


def _reward_drop(
    answers: list[Answer], reference: list[Answer] | None, config: MonitoringConfig, alpha: float
) -> Check:
    """A one-sided Mann-Whitney rank-sum test: the analysed reviews and the eval prompts are
    different prompts, two independent samples (not the paired Wilcoxon of the comparison)."""
    from scipy.stats import mannwhitneyu

    name, label = "reward_drop", "Rewards not below the eval split's"
    if not config.drop_test or not reference:
        why = "monitoring.drop_test is off" if not config.drop_test else "no eval-split reference"
        return Check(name, label, "p", "at least", None, alpha, None, NOT_MEASURED, why)
    rewards, reference_rewards = [a.reward for a in answers], [a.reward for a in reference]
    # Ranked at the comparison's precision: equal scores reached by another float path tie.
    p_drop = float(
        mannwhitneyu(settled(rewards), settled(reference_rewards), alternative="less").pvalue
    )
    means = (
        f"{statistics.fmean(rewards):.3f} vs {statistics.fmean(reference_rewards):.3f}, "
        f"one-sided Mann-Whitney p = {fmt(p_drop, 4)}"
    )
    if p_drop < alpha:
        verdict, reason = FAIL, f"rewards are significantly lower than on the eval split ({means})"
    else:
        verdict, reason = PASS, f"no significant drop from the eval split ({means})"
    return Check(name, label, "p", "at least", p_drop, alpha, None, verdict, reason)


def run_checks(
    answers: list[Answer],
    reference: list[Answer] | None,
    config: MonitoringConfig,
    alpha: float,
) -> list[Check]:
    """Every check on the analysed answers, against the same model's answers on its eval split
    (`reference`; None or empty where it is not known, as for offline logs)."""
    reference = reference or None

    def on_reference(measure) -> float | None:
        return measure(reference)[0] if reference else None

    return [
        _mean_reward(answers, reference, config),
        _reward_drop(answers, reference, config, alpha),
        _rate(
            "parse_rate", "Parsed into the 10 fields", "min_parse_rate", "at least",
            _parse_rate(answers), on_reference(_parse_rate), config,
        ),
        _rate(
            "truncated", "Truncated at the token budget", "max_truncated", "at most",
            _truncated(answers), on_reference(_truncated), config,
        ),
        _rate(
            "sentiment_agreement", "Sentiment agrees with the stars", "min_sentiment_agreement",
            "at least", _agreement(answers), on_reference(_agreement), config,
        ),
        *(_collapse(answers, reference, field, config) for field in COLLAPSE_LABELS),
    ]  # fmt: skip


def format_value(value: float | None, unit: str) -> str:
    if unit == "share":
        return _percent(value)
    return fmt(value, 4 if unit == "p" else 3)


def checks_markdown(checks: list[dict[str, Any]]) -> str:
    """The checks as a table: value, threshold, the model's eval-split value, verdict, why."""
    lines = [
        "| Check | Value | Threshold | On its eval split | Verdict | Why |",
        "|---|---:|---|---:|---|---|",
    ]
    for check in checks:
        unit = check["unit"]
        threshold = f"{check['bound']} {format_value(check['threshold'], unit)}"
        reason = check["reason"].replace("|", "\\|")
        lines.append(
            f"| {check['label']} | {format_value(check['value'], unit)} | {threshold} | "
            f"{format_value(check['reference'], unit)} | {check['verdict']} | {reason} |"
        )
    return "\n".join(lines) + "\n"
