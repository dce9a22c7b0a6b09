"""After promotion: the model exported, put to work on new reviews, and its rewards watched.

- export: the champion (or seed N, or an adapter folder) merged into plain weights, with a card.
- analyze: every new review through the production model, one JSONL row each; then the drift
  rule, which starts the scheduled-retraining deployment on drift.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from configs.recipe import DEFAULT_RECIPE, Recipe
from flows.pipeline import DEFAULT_ARTIFACTS, DEFAULT_DATA, _open, prepare_audited, starting_model
from tasks.core.manifests import Adapter, BaseModelArtifact, PreparedData
from tasks.core.store import ArtifactStore, digest_folder
from tasks.evaluation import champion as champions
from tasks.evaluation.evaluate import evaluate_model_task, load_with_adapter
from tasks.production import analyze as analysis
from tasks.production import monitoring
from tasks.production.export import export_model
from tasks.training.train import train_seed_task

CHAMPION = "champion"
DEFAULT_RETRAINING = "tucano-scheduled-retraining/scheduled-retraining-local"


class ModelChoiceError(ValueError):
    """--model names nothing this store or recipe has."""


class ProductionModel(NamedTuple):
    base: BaseModelArtifact
    adapter: Adapter | None
    label: str
    # The prompt sets it was judged on: its eval split is the monitoring reference, and neither
    # its train nor its eval orders count as new.
    judged_on: PreparedData
    verdict: str | None


def production_model(spec: str, recipe: Recipe, store: ArtifactStore, data: str) -> ProductionModel:
    """The champion (the recipe's starting model while there is none), seed N of the recipe
    (trained if it has not been), or an adapter folder trained from the recipe's starting model."""
    if spec == CHAMPION and (champion := champions.read_champion(store)) is not None:
        judged_on = champion.trained_on or prepare_audited(recipe, store, data)
        return ProductionModel(
            champion.base, champion.adapter, champion.label, judged_on, _promotion_reason(store)
        )
    prepared = prepare_audited(recipe, store, data)
    start = starting_model(recipe, store, prepared).model
    if spec == CHAMPION:
        return ProductionModel(start, None, f"base model {start.location}", prepared, None)
    if spec.startswith("seed-") and spec[5:].isdigit():
        seed = int(spec[5:])
        adapter = train_seed_task(recipe.training, recipe.lora, prepared, start, seed, store)
        return ProductionModel(start, adapter, f"seed {seed} adapter", prepared, None)
    folder = Path(spec)
    if not (folder / "adapter_config.json").is_file():
        raise ModelChoiceError(
            f"--model {spec}: not 'champion', 'seed-N' or a folder with adapter_config.json"
        )
    # Named by content: two folders called "final" are two adapters.
    digest = digest_folder(folder)
    location = f"exports/adapters/{digest[:16]}"
    stored = store.put_dir(folder, location)
    adapter = Adapter(
        fingerprint=digest,
        seed=-1,  # trained elsewhere: no seed or training record of this project
        run_key="external",
        folder=location,
        log_history="",
        global_step=0,
        stop_reason=f"external adapter from {folder}",
    )
    return ProductionModel(start, adapter, f"adapter {stored}", prepared, None)


def _promotion_reason(store: ArtifactStore) -> str | None:
    decisions = store.listdir(champions.DECISIONS)
    for name in reversed(decisions):
        decision = store.read_json(f"{champions.DECISIONS}/{name}")
        if decision["outcome"] == "promoted":
            return f"promoted: {decision['reason']}"
    return None


def _eval_rows(recipe: Recipe, model: ProductionModel, store: ArtifactStore) -> list[dict]:
    """The model's scored answers on the eval split it was judged on (cached)."""
    rows = evaluate_model_task(recipe.evaluation, model.judged_on, model.base, model.adapter, store)
    return store.read_jsonl(rows.rows)


def _mean_by_task(rows: list[dict[str, Any]]) -> dict[str, float]:
    by_task: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        by_task[row["task"]].append(row["total"])
    return {task: statistics.fmean(values) for task, values in sorted(by_task.items())}


@flow(name="tucano-export")
def export_flow(
    to: str,
    model: str = CHAMPION,
    config: str = str(DEFAULT_RECIPE),
    artifacts: str = DEFAULT_ARTIFACTS,
    data: str = DEFAULT_DATA,
) -> str:
    recipe, store = _open(config, artifacts)
    if model == CHAMPION and champions.read_champion(store) is None:
        raise ModelChoiceError(
            f"--model champion: {store.uri(champions.CURRENT)} does not exist (no model promoted "
            "yet); export seed-N or an adapter folder instead"
        )
    # 1. The model, with the eval split it was judged on.
    chosen = production_model(model, recipe, store, data)
    # 2. Its scores there (cached: the pipeline or the retraining evaluated it already).
    scores = _mean_by_task(_eval_rows(recipe, chosen, store))
    card = {
        "model": chosen.label,
        "recipe": recipe.name,
        "recipe_fingerprint": recipe.fingerprint(),
        "base": chosen.base.location,
        "data_fingerprint": chosen.judged_on.fingerprint,
        "eval_scores": scores,
        "verdict": chosen.verdict,
    }
    # 3. Merged weights, tokenizer and card, written complete or not at all.
    uri = export_model(chosen.base, chosen.adapter, card, to, store)
    get_run_logger().info("exported %s to %s", chosen.label, uri)
    return uri


@flow(name="tucano-analyze")
def analyze_flow(
    output: str,
    model: str = CHAMPION,
    config: str = str(DEFAULT_RECIPE),
    artifacts: str = DEFAULT_ARTIFACTS,
    data: str = DEFAULT_DATA,
    limit: int | None = None,
    retraining_deployment: str = DEFAULT_RETRAINING,
) -> dict[str, Any]:
    recipe, store = _open(config, artifacts)
    log = get_run_logger()
    # 1. The production model and the orders it must not be judged on again.
    chosen = production_model(model, recipe, store, data)
    excluded = _seen_orders(store, chosen)
    # 2. Every new review through it, resuming after the rows already written.
    prompts = analysis.new_reviews(data, excluded, limit)
    log.info("%d new reviews (%d orders excluded as seen)", len(prompts), len(excluded))
    loaded, tokenizer = load_with_adapter(chosen.base, chosen.adapter, store)
    rows = analysis.analyze(loaded, tokenizer, prompts, recipe.evaluation, Path(output))
    # 3. The summary: printed, an artifact, a plot beside the rows.
    summary = analysis.summarize(rows)
    if not rows:
        print(analysis.summary_markdown(summary, output, plot=None), flush=True)
        return {"summary": summary, "monitoring": None}
    plot = analysis.summary_plot(rows, summary, Path(output).with_suffix(".summary.png"))
    markdown = analysis.summary_markdown(summary, output, plot=str(plot))
    print(markdown, flush=True)
    create_markdown_artifact(key="tucano-review-analysis", markdown=markdown)
    # 4. The drift rule against its own extraction rewards on the eval split it was judged on.
    reference = [r["total"] for r in _eval_rows(recipe, chosen, store) if r["task"] == "extraction"]
    decision = monitoring.drift_decision(
        [row["total"] for row in rows], reference, recipe.monitoring, recipe.compare.alpha
    )
    decision["model"] = chosen.label
    # 5. On drift, retraining on this data, once per drift.
    if decision["status"] == monitoring.DRIFT:
        decision["retraining"] = monitoring.start_retraining(
            retraining_deployment,
            monitoring.drift_key(chosen.label, [row["review_id"] for row in rows]),
            {"recipe": config, "artifacts": artifacts, "data": data},
        )
        log.warning("reward drift: %s; retraining %s", decision["reason"], decision["retraining"])
    decision["record"] = monitoring.record_monitoring(decision, store)
    return {"summary": summary, "monitoring": decision}


def _seen_orders(store: ArtifactStore, model: ProductionModel) -> set[str]:
    """Orders in any prompt set a champion trained or was judged on, and the model's own."""
    prepared = [c.trained_on for c in champions.champion_history(store) if c.trained_on]
    orders = set()
    for data in (*prepared, model.judged_on):
        for rows in (store.read_jsonl(data.train), store.read_jsonl(data.eval)):
            orders.update(row["order_id"] for row in rows if row.get("order_id"))
    return orders
