"""How far each model's insights answers tell the truth about their data summary's table.

The insights reward reads each claim an analysis makes about the table's groups (a value, "o
maior", a comparison, a share: rewards/table_claims.py) and holds it to the table; the report
counts, per model, the answers whose every claim is true, the claims that are true of all it
made, and the answers that make none. A model better on insights says more true things about
the data and no more false ones, not one that writes more.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rewards.insights import claims_of

MEASURES = ("answers with every claim true", "claims true", "answers with no claim")


def claim_truth(answers: Iterable[tuple[str, str | None]]) -> dict[str, list[int]]:
    """For (completion, data summary) of each insights answer: measure -> [count, of how many].
    An answer that makes no claim counts in "answers with no claim" and is not one "with every
    claim true"."""
    counts = {measure: [0, 0] for measure in MEASURES}
    for completion, summary in answers:
        claims = claims_of(completion, summary)
        if claims is None:
            continue  # no table to hold it to
        true = sum(claim.true for claim in claims)
        counts["answers with every claim true"][0] += bool(claims) and true == len(claims)
        counts["answers with every claim true"][1] += 1
        counts["claims true"][0] += true
        counts["claims true"][1] += len(claims)
        counts["answers with no claim"][0] += not claims
        counts["answers with no claim"][1] += 1
    return counts


def by_model(
    rows_by_model: dict[str, list[dict[str, Any]]], prompts: dict[str, dict[str, Any]]
) -> dict[str, dict[str, list[int]]]:
    """`claim_truth` of each model's insights answers on the eval split."""
    return {
        model: claim_truth(
            (row["completion"], prompts[row["prompt_id"]].get("data_summary"))
            for row in rows
            if row["task"] == "insights"
        )
        for model, rows in rows_by_model.items()
    }
