"""The production ("champion") model and the rule that replaces it.

The champion pointer is a JSON file in the artifact store, replaced atomically; every promotion
also leaves its own file under `champion/history/`, so the full lineage survives any one update.
A challenger replaces the champion only when it is significantly better (Holm-corrected, one-sided
Wilcoxon on the eval split) on every task the recipe names and significantly worse on none.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact
from pydantic import BaseModel, ConfigDict, TypeAdapter

from configs.recipe import RetrainingConfig, load_recipe
from tasks.core.manifests import Adapter, BaseModelArtifact, PreparedData
from tasks.core.store import ArtifactStore
from tasks.evaluation.leakage import leaked_prompts
from tasks.evaluation.report import fmt
from tasks.evaluation.stats import PairedTest, compare_rows

CURRENT = "champion/current.json"
HISTORY = "champion/history"
LAST_TRAINED = "retraining/last_trained.json"
DECISIONS = "retraining/decisions"


class Champion(BaseModel):
    """A model in production: its base and, unless it is the base model itself, its adapter."""

    model_config = ConfigDict(frozen=True)

    base: BaseModelArtifact
    adapter: Adapter | None
    promoted_at: str
    data_fingerprint: str
    recipe: str
    # The prompt sets its adapter trained on: no later eval split may contain any of them.
    trained_on: PreparedData | None = None

    @property
    def label(self) -> str:
        if self.adapter is None:
            return f"base model {self.base.location}"
        return f"seed {self.adapter.seed} adapter {self.adapter.folder}"


def timestamp() -> str:
    """UTC, sortable as text: history and decision files list in time order."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


def training_state(data_fingerprint: str, recipe_path: str) -> dict[str, str]:
    """What a retraining trained on: a new run is needed when either part changes."""
    return {
        "data_fingerprint": data_fingerprint,
        "recipe_fingerprint": load_recipe(recipe_path).fingerprint(),
    }


def read_champion(store: ArtifactStore) -> Champion | None:
    return Champion.model_validate(store.read_json(CURRENT)) if store.exists(CURRENT) else None


def promote(champion: Champion, store: ArtifactStore) -> None:
    """History first, pointer last: a crash in between leaves the old champion in place."""
    record = champion.model_dump(mode="json")
    store.write_json(f"{HISTORY}/{champion.promoted_at}.json", record)
    store.write_json(CURRENT, record)


def champion_history(store: ArtifactStore) -> list[Champion]:
    if not store.exists(HISTORY):
        return []
    return [
        Champion.model_validate(store.read_json(f"{HISTORY}/{name}"))
        for name in sorted(store.listdir(HISTORY))
    ]


def eval_prompts_trained_on(
    history: list[Champion], eval_rows: list[dict[str, Any]], store: ArtifactStore
) -> dict[str, list[str] | None]:
    """Per champion of the history, the eval prompts its adapter trained on, or None where that
    cannot be known. Any one makes a champion-vs-challenger comparison on them meaningless."""
    found: dict[str, list[str] | None] = {}
    for model in history:
        if model.adapter is None:
            continue  # a base model was trained on none of this data
        if model.trained_on is None:
            found[model.label] = None
        elif leaked := leaked_prompts(store.read_jsonl(model.trained_on.train), eval_rows):
            found[model.label] = leaked
    return found


def refusal_reason(found: dict[str, list[str] | None]) -> str:
    """Why a retraining cannot compare on this eval split, and what a person can do about it."""
    parts = [
        f"{label} trained on {len(ids)} of its prompts (e.g. {', '.join(ids[:3])})"
        if ids is not None
        else f"{label} has no record of what it trained on (promoted before champions kept one)"
        for label, ids in found.items()
    ]
    return (
        f"the new eval split may hold prompts a champion trained on: {'; '.join(parts)}. "
        "Keep data.eval_share as it was, or start a new champion history (move champion/ aside)"
    )


def best_seed(adapters: list[Adapter]) -> Adapter:
    """The challenger: the seed whose adapter scored best on the held-out train prompts."""
    return max(
        adapters,
        key=lambda a: a.best_eval_reward if a.best_eval_reward is not None else float("-inf"),
    )


def decide(
    champion_rows: list[dict[str, Any]],
    challenger_rows: list[dict[str, Any]],
    config: RetrainingConfig,
    alpha: float,
) -> dict[str, Any]:
    results = compare_rows(champion_rows, challenger_rows, alpha)
    # A task with no eval prompts cannot be shown better.
    better = [t for t in config.promote_on if t in results and results[t].significantly_better]
    worse = [t for t, r in results.items() if r.significantly_worse]
    missing = [t for t in config.promote_on if t not in better]
    if missing:
        reason = f"not significantly better on {', '.join(missing)}"
    elif worse:
        reason = f"significantly worse on {', '.join(worse)}"
    else:
        reason = f"significantly better on {', '.join(better)} and worse on none"
    return {
        "promote": not missing and not worse,
        "reason": reason,
        "promote_on": list(config.promote_on),
        "significantly_better": better,
        "significantly_worse": worse,
        "comparison": results,
    }


def record_decision(decision: dict[str, Any], store: ArtifactStore) -> str:
    """Every retraining decision, promotion or not, as a file and a Prefect artifact."""
    path = f"{DECISIONS}/{decision['decided_at']}.json"
    # The comparison's typed results go to the file under their report.json keys.
    store.write_json(path, TypeAdapter(dict[str, Any]).dump_python(decision))
    lines = [
        f"# Retraining decision: {decision['outcome']}",
        "",
        f"- Reason: {decision['reason']}",
        f"- Data fingerprint: `{decision['data_fingerprint'][:16]}`",
        f"- Champion: {decision.get('champion') or 'n/a'}",
        f"- Challenger: {decision.get('challenger') or 'n/a'}",
        f"- Record: `{store.uri(path)}`",
    ]
    comparison: dict[str, PairedTest] = decision.get("comparison") or {}
    if comparison:
        lines += [
            "",
            "| Task | Champion | Challenger | Δ | p better (Holm) | p worse (Holm) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, r in comparison.items():
            lines.append(
                f"| {name} | {r.start_mean:.3f} | {r.tuned_mean:.3f} | {r.delta:+.3f} | "
                f"{fmt(r.p_better_holm, 4)} | {fmt(r.p_worse_holm, 4)} |"
            )
    create_markdown_artifact(
        key="tucano-retraining-decision",
        markdown="\n".join(lines) + "\n",
        description=f"Scheduled retraining: {decision['outcome']}.",
    )
    return path


def new_decision(outcome: str, reason: str, data_fingerprint: str, **extra: Any) -> dict[str, Any]:
    return {
        "decided_at": timestamp(),
        "outcome": outcome,
        "reason": reason,
        "data_fingerprint": data_fingerprint,
        **extra,
    }


record_decision_task = task(record_decision, name="record-retraining-decision")
