"""Per field, what the extraction answers say against the review's reading: a field stuck at one
value shows, whatever the mean reward does."""

from __future__ import annotations

import json

from tasks.evaluation.field_agreement import field_agreement, render

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
