"""Per field, what the extraction answers say against the review's reading: a field stuck at one
value shows, whatever the mean reward does."""

from __future__ import annotations

import json

import pytest

from tasks.evaluation.field_agreement import (
    MISSES,
    NOT_MEASURED,
    READS_CAUSE,
    READS_COMPLAINT,
    field_agreement,
    flag_trust,
    render,
    render_trust,
)

BROKEN = "Veio quebrado\nA cadeira veio quebrada e o vendedor não responde. Não recomendo."
LATE = "Atrasou muito\nO pedido demorou um mês para chegar."
ON_TIME_PRAISE = "Perfeito\nChegou antes do prazo, adorei."


def answer(**fields) -> str:
    base = {
        "sentiment_score": 1, "sentiment": "negativo", "delivery_issue": False,
        "product_issue": False, "seller_issue": False, "delivered_late": False,
        "would_recommend": False, "churn_risk": "alto", "product_category": "moveis",
        "summary": "Veio quebrado",
    }  # fmt: skip
    return json.dumps({**base, **fields}, ensure_ascii=False)


def test_each_field_is_counted_where_the_review_settles_it() -> None:
    """A model that flags delivery on every review: caught where stated, a false alarm where
    ruled out; the product and seller problems it never flags show as none of those."""
    answers = [
        (answer(delivery_issue=True), BROKEN, 1, False),
        (answer(delivery_issue=True, summary="Pedido atrasou um mês"), LATE, 1, True),
        (
            answer(delivery_issue=True, would_recommend=True, summary="Chegou antes do prazo"),
            ON_TIME_PRAISE,
            5,
            False,
        ),
        ("not json at all", LATE, 1, True),  # unparsed: counted in none
    ]
    counts = field_agreement(answers)
    assert counts["delivery_issue: flagged where stated"] == [1, 1]
    assert counts["delivery_issue: flagged where ruled out"] == [2, 2]
    assert counts["delivery_issue: flagged of all"] == [3, 3]
    assert counts["product_issue: flagged where stated"] == [0, 1]
    assert counts["seller_issue: flagged where stated"] == [0, 1]
    assert counts["would_recommend: as the review settles it"] == [3, 3]
    assert counts["summary: copies the review's first line"] == [1, 3]
    assert counts["summary: of this review"][1] == 3


def test_the_table_puts_models_side_by_side() -> None:
    counts = field_agreement([(answer(product_issue=True), BROKEN, 1, False)])
    lines = render({"base": counts, "seed 42": counts}, "Fields")
    assert lines[2] == "| Field | base | seed 42 |"
    assert "| product_issue: flagged where stated | 1 of 1 (100%) | 1 of 1 (100%) |" in lines
    assert "| seller_issue: flagged where ruled out | none | none |" in lines


def _counts(**rates: tuple[tuple[int, int], tuple[int, int]]) -> dict[str, list[int]]:
    counts = field_agreement([])
    for issue, (stated, ruled_out) in rates.items():
        counts[f"{issue}: flagged where stated"] = list(stated)
        counts[f"{issue}: flagged where ruled out"] = list(ruled_out)
    return counts


@pytest.mark.parametrize(
    ("stated", "ruled_out", "reads"),
    [
        # The earlier record's delivery flag: raised on nearly every complaint, whatever about.
        ((40, 48), (20, 22), READS_COMPLAINT),
        ((38, 49), (7, 48), READS_CAUSE),
        # Half as often where ruled out as where stated is the line.
        ((40, 50), (20, 50), READS_COMPLAINT),
        ((40, 50), (19, 50), READS_CAUSE),
        ((0, 16), (0, 54), MISSES),
        ((3, 16), (0, 54), MISSES),  # under a quarter
        ((4, 16), (0, 54), READS_CAUSE),
        ((5, 10), (0, 0), READS_CAUSE),  # no review ruled it out: no false alarm to count
        ((0, 0), (3, 40), NOT_MEASURED),  # the split states no such problem
    ],
)
def test_a_flag_is_judged_by_where_it_is_raised(stated, ruled_out, reads) -> None:
    assert flag_trust(_counts(delivery_issue=(stated, ruled_out)))["delivery_issue"] == reads


def test_the_trust_table_names_each_flags_reading_per_model() -> None:
    sft = _counts(delivery_issue=((40, 48), (20, 22)), product_issue=((0, 16), (0, 54)))
    tuned = _counts(delivery_issue=((38, 49), (7, 48)), product_issue=((9, 16), (2, 54)))
    lines = render_trust({"SFT": sft, "seed 42": tuned}, "Flags")
    assert lines[0] == "## Flags"
    assert "| Flag | SFT | seed 42 |" in lines
    (delivery,) = [line for line in lines if line.startswith("| delivery_issue |")]
    assert delivery == (
        f"| delivery_issue | {READS_COMPLAINT} (stated 40 of 48 (83%); ruled out 20 of 22 (91%)) "
        f"| {READS_CAUSE} (stated 38 of 49 (78%); ruled out 7 of 48 (15%)) |"
    )
    (product,) = [line for line in lines if line.startswith("| product_issue |")]
    assert product.startswith(f"| product_issue | {MISSES} (stated 0 of 16 (0%);")
    (seller,) = [line for line in lines if line.startswith("| seller_issue |")]
    unmeasured = f"{NOT_MEASURED} (stated none; ruled out none)"
    assert seller == f"| seller_issue | {unmeasured} | {unmeasured} |"
