"""The report's count of what each model's insights answers claim about their table
(tasks/evaluation/claim_truth.py)."""

from __future__ import annotations

from tasks.evaluation.claim_truth import by_model, claim_truth
from tasks.evaluation.field_agreement import render

SUMMARY = (
    "| estado | pedidos | atraso | nota média |\n|---|---|---|---|\n"
    "| SP | 900 | 5,0% | 4,1 |\n| RJ | 300 | 15,0% | 3,5 |\n| MG | 200 | 9,0% | 3,9 |"
)
TRUE = "- RJ tem o maior atraso: 15,0%.\n- Revisar a logística de RJ."
ONE_FALSE = "- SP tem o maior atraso: 5,0%.\n- Revisar a logística de SP."
NONE = "- Revisar a logística e monitorar as avaliações."


def test_answers_and_claims_are_counted_true_false_and_none() -> None:
    counts = claim_truth([(TRUE, SUMMARY), (ONE_FALSE, SUMMARY), (NONE, SUMMARY), (TRUE, None)])
    # the answer without a summary has no table to hold it to, and counts in nothing
    assert counts == {
        "answers with every claim true": [1, 3],
        "claims true": [
            3,
            4,
        ],  # TRUE: superlative + value; ONE_FALSE: a false superlative, its value true
        "answers with no claim": [1, 3],
    }


def test_each_model_is_counted_on_its_own_insights_answers() -> None:
    prompts = {"i1": {"data_summary": SUMMARY}, "e1": {"data_summary": None}}
    rows = {
        "base": [
            {"prompt_id": "i1", "task": "insights", "completion": ONE_FALSE},
            {"prompt_id": "e1", "task": "extraction", "completion": "{}"},
        ],
        "seed 7": [{"prompt_id": "i1", "task": "insights", "completion": TRUE}],
    }
    counts = by_model(rows, prompts)
    assert counts["base"]["answers with every claim true"] == [0, 1]
    assert counts["seed 7"]["answers with every claim true"] == [1, 1]
    table = "\n".join(render(counts, "Insights", "Measure"))
    assert "| Measure | base | seed 7 |" in table
    assert "| answers with every claim true | 0 of 1 (0%) | 1 of 1 (100%) |" in table
