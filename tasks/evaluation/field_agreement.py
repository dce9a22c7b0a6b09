"""How an extraction model's judgement fields read the reviews, field by field.

The mean reward can rise while one field says the same thing to every review: a model of this
project flagged a delivery problem on 62 of its 63 negative readings and a product or seller
problem on none, while 22 of those reviews complained of the product. Per field, this counts what
the reward's own reading of each review (rewards/review_evidence.py) says against what the
answer says: each issue flagged where the customer wrote it down, and where the review rules it
out (a false alarm), and on all answers; the recommendation where the review settles it; the
summary that says something of this review, and the one that only copies its first line (its title,
where it has one).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rewards.common import fold
from rewards.extraction import parse_json_object
from rewards.review_evidence import ISSUES, read_review

# (field, measure): what is counted, in report order.
MEASURES = (
    *(
        (issue, measure)
        for issue in ISSUES
        for measure in ("flagged where stated", "flagged where ruled out", "flagged of all")
    ),
    ("would_recommend", "as the review settles it"),
    ("summary", "of this review"),
    ("summary", "copies the review's first line"),
)


def _first_line(review_text: str) -> str:
    return " ".join(fold(review_text.split("\n", 1)[0]).split()).strip(" .!")


def field_agreement(
    answers: Iterable[tuple[str, str | None, int | None, bool | None]],
) -> dict[str, list[int]]:
    """For (completion, review text, stars, delivered late) of each extraction answer:
    "field: measure" -> [count, of how many]. Unparsed answers count in none."""
    counts = {f"{field}: {measure}": [0, 0] for field, measure in MEASURES}

    def count(field: str, measure: str, hit: bool) -> None:
        counts[f"{field}: {measure}"][0] += hit
        counts[f"{field}: {measure}"][1] += 1

    for completion, text, stars, late in answers:
        data, _ = parse_json_object(completion)
        if data is None:
            continue
        reading = read_review(text, stars, late)
        stated, ruled_out = reading.stated_problems(), reading.ruled_out_problems()
        for issue in ISSUES:
            flagged = data.get(issue) is True
            if issue in stated:
                count(issue, "flagged where stated", flagged)
            elif issue in ruled_out:
                count(issue, "flagged where ruled out", flagged)
            count(issue, "flagged of all", flagged)
        recommend = reading.fields.get("would_recommend")
        if recommend is not None:
            count("would_recommend", "as the review settles it", recommend.credit(
                data.get("would_recommend")) == 1.0)  # fmt: skip
        summary = data.get("summary")
        if reading.summary_credit(summary) is not None:
            count("summary", "of this review", reading.summary_credit(summary) == 1.0)
        if text and isinstance(summary, str):
            count(
                "summary",
                "copies the review's first line",
                _first_line(text) == _first_line(summary),
            )
    return counts


def by_model(
    rows_by_model: dict[str, list[dict[str, Any]]], prompts: dict[str, dict[str, Any]]
) -> dict[str, dict[str, list[int]]]:
    """`field_agreement` of each model's extraction answers on the eval split."""
    return {
        model: field_agreement(
            (
                row["completion"],
                prompts[row["prompt_id"]].get("review_text"),
                prompts[row["prompt_id"]].get("review_score"),
                prompts[row["prompt_id"]].get("gold_delivered_late"),
            )
            for row in rows
            if row["task"] == "extraction"
        )
        for model, rows in rows_by_model.items()
    }


# What a flag can be trusted for, read off its answers on an eval split. A flag raised on fewer
# than a quarter of the complaints that state its cause finds too few of them to be counted on.
MISSES_BELOW = 0.25
# A flag raised where the review rules its cause out at least half as often as where the review
# states it marks that the customer complains, not what about: its cause cannot be read from it.
COMPLAINT_NOT_CAUSE = 0.5
READS_CAUSE = "reads its cause"
READS_COMPLAINT = "reads a complaint, not its cause"
MISSES = "misses it"
NOT_MEASURED = "not measured"


def _rate(counts: list[int]) -> float | None:
    return counts[0] / counts[1] if counts[1] else None


def flag_trust(agreement: dict[str, list[int]]) -> dict[str, str]:
    """Per issue flag, what its answers say it reads (MISSES, READS_COMPLAINT, READS_CAUSE or
    NOT_MEASURED where the split states no such problem), from `field_agreement`'s counts."""
    trust = {}
    for issue in ISSUES:
        stated = _rate(agreement[f"{issue}: flagged where stated"])
        ruled_out = _rate(agreement[f"{issue}: flagged where ruled out"])
        if stated is None:
            trust[issue] = NOT_MEASURED
        elif stated < MISSES_BELOW:
            trust[issue] = MISSES
        elif ruled_out is not None and ruled_out >= COMPLAINT_NOT_CAUSE * stated:
            trust[issue] = READS_COMPLAINT
        else:
            trust[issue] = READS_CAUSE
    return trust


def render_trust(agreement: dict[str, dict[str, list[int]]], title: str) -> list[str]:
    """One row per issue flag, one column per model: what the flag reads, with its counts where
    stated and where ruled out."""
    models = list(agreement)
    trust = {model: flag_trust(counts) for model, counts in agreement.items()}
    lines = [
        f"## {title}",
        "",
        f"A flag {MISSES} where it is raised on fewer than {MISSES_BELOW:.0%} of the reviews "
        f"that state its problem; it {READS_COMPLAINT} where it is raised on reviews that rule "
        f"its problem out at least {COMPLAINT_NOT_CAUSE:.0%} as often as where they state it: "
        "then it says that the customer complains, not what about.",
        "",
        "| Flag | " + " | ".join(models) + " |",
        "|---|" + "---|" * len(models),
    ]
    for issue in ISSUES:
        cells = []
        for model in models:
            stated = agreement[model][f"{issue}: flagged where stated"]
            ruled_out = agreement[model][f"{issue}: flagged where ruled out"]
            cells.append(
                f"{trust[model][issue]} (stated {_cell(*stated)}; ruled out {_cell(*ruled_out)})"
            )
        lines.append(f"| {issue} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _cell(count: int, of: int) -> str:
    return f"{count} of {of} ({100 * count / of:.0f}%)" if of else "none"


def render(
    agreement: dict[str, dict[str, list[int]]], title: str, rows_are: str = "Field"
) -> list[str]:
    """One row per measure (`rows_are` names them), one column per model: "n of m (p%)"."""
    models = list(agreement)
    lines = [
        f"## {title}",
        "",
        f"| {rows_are} | " + " | ".join(models) + " |",
        "|---|" + "---:|" * len(models),
    ]
    for key in next(iter(agreement.values()), {}):
        lines.append(
            f"| {key} | " + " | ".join(_cell(*agreement[model][key]) for model in models) + " |"
        )
    return [*lines, ""]
