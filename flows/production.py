"""After promotion: the model exported, put to work on new reviews, and its answers watched.

- export: the champion (or seed N, an adapter folder) merged into plain weights, with a card.
- analyze: every new review through the production model, one JSONL row each; then the
  monitor's checks, whose drift starts the scheduled-retraining deployment.

The model always comes from the store (the champion, else the latest pipeline run), never from
the reviews being analysed: a folder of new reviews is never prepared as training data.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any, NamedTuple

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact

from configs.recipe import DEFAULT_RECIPE, Recipe
from flows.parameters import DEFAULT_ARTIFACTS, DEFAULT_DATA
from flows.pipeline import (
    LATEST_RUN,
    PipelineRecord,
    _open,
    read_latest_run,
)
from tasks.core.manifests import Adapter, BaseModelArtifact, PreparedData, TrainingRecord
from tasks.core.store import ArtifactStore, digest_folder
from tasks.evaluation import champion as champions
from tasks.evaluation.evaluate import evaluate_model_task, load_with_adapter
from tasks.production import analyze as analysis
from tasks.production import checks, monitoring
from tasks.production.export import CARD_FILE, export_model
from tasks.training.train import training_records

CHAMPION = "champion"
DEFAULT_RETRAINING = "tucano-scheduled-retraining/scheduled-retraining-local"


class ModelChoiceError(ValueError):
    """--model names nothing this store has."""


class ProductionModel(NamedTuple):
    base: BaseModelArtifact
    adapter: Adapter | None
    label: str
    # The prompt sets it was judged on: its eval split is the monitoring reference, and neither
    # its train nor its eval orders count as new.
    judged_on: PreparedData
    verdict: str | None


def production_model(spec: str, store: ArtifactStore) -> ProductionModel:
    """The champion (the latest pipeline run's starting model while none is promoted), seed N
    (of the latest pipeline run, else the newest finished `tucano train` run of that seed), a
    training run's key, an adapter folder (on the model its run started from), or a folder
    `tucano export` wrote, as it is."""
    if spec == CHAMPION:
        return _champion(store)
    folder = Path(spec)
    if (folder / CARD_FILE).is_file():
        return _exported(folder, store)
    if (folder / "adapter_config.json").is_file():
        return _adapter_folder(folder, store)
    seed = int(spec[5:]) if spec.startswith("seed-") and spec[5:].isdigit() else None
    records = training_records(store)
    if seed is not None:
        run = read_latest_run(store)
        adapter = next((a for a in run.adapters if a.seed == seed), None) if run else None
        if adapter is not None:
            label = f"seed {seed} adapter {adapter.folder}"
            return ProductionModel(run.base, adapter, label, run.prepared, None)
        trained = [record for record in records if record.adapter.seed == seed]
    else:
        trained = [record for record in records if record.adapter.run_key.startswith(spec)]
    if len(trained) == 1 or (seed is not None and trained):
        return _model_of_run(trained[-1])
    raise ModelChoiceError(f"--model {spec}: {_what_matches(spec, trained)}; {holdings(store)}")


def _model_of_run(record: TrainingRecord) -> ProductionModel:
    adapter = record.adapter
    label = f"seed {adapter.seed} adapter {adapter.folder}"
    return ProductionModel(record.base, adapter, label, record.prepared, None)


def _what_matches(spec: str, trained: list[TrainingRecord]) -> str:
    if trained:
        return f"{len(trained)} training runs' keys start with it; give more of the key"
    if spec.startswith("seed-"):
        seed = spec.removeprefix("seed-")
        return f"no finished training run of seed {seed} (`tucano train --seed {seed}` trains one)"
    return (
        "not 'champion', 'seed-N', the key of a finished training run, a folder with "
        f"adapter_config.json or a model folder `tucano export` wrote (with {CARD_FILE})"
    )


def holdings(store: ArtifactStore) -> str:
    """What a --model can name in this store, said for an error message."""
    found = []
    champion = champions.read_champion(store)
    if champion is not None:
        found.append(f"the champion ({champion.label})")
    run = read_latest_run(store)
    if run is not None:
        seeds = ", ".join(f"seed-{adapter.seed}" for adapter in run.adapters)
        found.append(f"the pipeline run of {run.finished_at} (recipe {run.recipe}: {seeds})")
    found += [
        f"seed-{record.adapter.seed} of `tucano train` (run key {record.adapter.run_key}, "
        f"{record.finished_at}, adapter {store.uri(record.adapter.folder)})"
        for record in training_records(store)
        if run is None or record.adapter not in run.adapters
    ]
    if not found:
        return (
            f"{store.root_uri} holds no trained model; train one with `make pipeline`, "
            f"`tucano pipeline --artifacts {store.root_uri}` or `tucano train --seed N "
            f"--artifacts {store.root_uri}`"
        )
    return f"{store.root_uri} holds " + "; ".join(found)


def _adapter_folder(folder: Path, store: ArtifactStore) -> ProductionModel:
    """An adapter folder: one a training run of this store made (found by its content, wherever
    it was copied to) on the model that run started from; else an adapter trained elsewhere, on
    the latest pipeline run's starting model."""
    digest = digest_folder(folder)
    for record in reversed(training_records(store)):
        if record.adapter.fingerprint == digest:
            return _model_of_run(record)
    run = read_latest_run(store)
    if run is None:
        raise ModelChoiceError(
            f"--model {folder}: no training run of this store made this adapter, and no pipeline "
            f"run has recorded a model to put it on; {holdings(store)}"
        )
    # Named by content: two folders called "final" are two adapters.
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
    return ProductionModel(run.base, adapter, f"adapter {stored}", run.prepared, None)


def _champion(store: ArtifactStore) -> ProductionModel:
    champion = champions.read_champion(store)
    if champion is None:
        run = _latest_run(CHAMPION, store)
        # Labelled as a base-model champion would be: the same model is the same drift.
        label = f"base model {run.base.location}"
        return ProductionModel(run.base, None, label, run.prepared, None)
    # A champion with no record of its prompt sets (a base model put there by hand) is judged
    # against the latest run's.
    judged_on = champion.trained_on or _latest_run(CHAMPION, store).prepared
    verdict = _promotion_reason(store)
    return ProductionModel(champion.base, champion.adapter, champion.label, judged_on, verdict)


def _latest_run(spec: str, store: ArtifactStore) -> PipelineRecord:
    run = read_latest_run(store)
    if run is None:
        unpromoted = "no model is promoted and " if spec == CHAMPION else ""
        raise ModelChoiceError(
            f"--model {spec}: {unpromoted}no pipeline run has recorded its models in this store "
            f"({store.uri(LATEST_RUN)} does not exist); {holdings(store)}"
        )
    return run


def _exported(folder: Path, store: ArtifactStore) -> ProductionModel:
    """A merged model as `tucano export` wrote it, judged against the prompt sets its card
    names (they must be in this store: its orders are not new, its eval split is the reference)."""
    card = json.loads((folder / CARD_FILE).read_text(encoding="utf-8"))
    if "judged_on" not in card:
        raise ModelChoiceError(
            f"--model {folder}: {CARD_FILE} has no 'judged_on' (the prompt sets the model was "
            "judged on); export it again with `tucano export`"
        )
    judged_on = PreparedData.model_validate(card["judged_on"])
    if not store.exists(judged_on.eval):
        raise ModelChoiceError(
            f"--model {folder}: {CARD_FILE} says it was judged on {judged_on.folder}, which "
            f"{store.root_uri} does not hold; pass --artifacts of the store it was exported from"
        )
    base = BaseModelArtifact(
        fingerprint=digest_folder(folder),
        source="exported",
        location=str(folder.resolve()),
        in_store=False,
    )
    return ProductionModel(
        base, None, f"exported {card['model']} ({folder})", judged_on, card.get("verdict")
    )


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
    recipe_path: str = str(DEFAULT_RECIPE),
    artifacts: str = DEFAULT_ARTIFACTS,
) -> str:
    recipe, store = _open(recipe_path, artifacts)
    if model == CHAMPION and champions.read_champion(store) is None:
        raise ModelChoiceError(
            f"--model champion: {store.uri(champions.CURRENT)} does not exist (no model promoted "
            "yet); export seed-N or an adapter folder instead"
        )
    # 1. The model, with the eval split it was judged on.
    chosen = production_model(model, store)
    # 2. Its scores there (cached: the pipeline or the retraining evaluated it already).
    scores = _mean_by_task(_eval_rows(recipe, chosen, store))
    card = {
        "model": chosen.label,
        "recipe": recipe.name,
        "recipe_fingerprint": recipe.fingerprint(),
        "base": chosen.base.location,
        "data_fingerprint": chosen.judged_on.fingerprint,
        # Where it was judged: analysing with the exported folder needs that eval split again.
        "judged_on": chosen.judged_on.model_dump(mode="json"),
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
    recipe_path: str = str(DEFAULT_RECIPE),
    artifacts: str = DEFAULT_ARTIFACTS,
    data: str = DEFAULT_DATA,
    limit: int | None = None,
    retraining_deployment: str = DEFAULT_RETRAINING,
) -> dict[str, Any]:
    recipe, store = _open(recipe_path, artifacts)
    log = get_run_logger()
    # 1. The reviews' prompts: a bad file stops here, naming it, before any model is loaded.
    reviews = analysis.review_prompts(data, recipe.data.extraction_instructions)
    # 2. The production model, from the store; a review of an order it was trained or judged on
    # gets a row that says so instead of an analysis.
    chosen = production_model(model, store)
    excluded = _seen_orders(store, chosen)
    for review in reviews:
        review["skipped"] = analysis.SEEN_ORDER if review["order_id"] in excluded else None
    new = [review for review in reviews if not review["skipped"]]
    prompts = [review for review in reviews if review["skipped"]] + new[:limit]
    log.info("%d new reviews, %d of seen orders", len(new), len(reviews) - len(new))
    # 3. Every new review through it, resuming after the rows already written.
    loaded, tokenizer = load_with_adapter(chosen.base, chosen.adapter, store)
    rows = analysis.analyze(loaded, tokenizer, prompts, recipe.evaluation, Path(output))
    # 4. The checks, on the analysed rows, against the same model's answers on the eval split it
    # was judged on.
    summary = analysis.summarize(rows)
    answered = analysis.analysed(rows)
    if not answered:
        print(analysis.summary_markdown(summary, None, output, plot=None), flush=True)
        return {"summary": summary, "monitoring": None}
    eval_rows = _eval_rows(recipe, chosen, store)
    eval_prompts = store.read_jsonl(chosen.judged_on.eval)
    reference = checks.eval_answers(eval_rows, eval_prompts)
    summary["eval_fields"] = analysis.eval_agreement(eval_rows, eval_prompts)
    answers = [
        checks.Answer.of(row["completion"], row["truncated"], row.get("review_score"), row["total"])
        for row in answered
    ]
    decision = monitoring.drift_decision(
        answers, reference, recipe.monitoring, recipe.compare.alpha
    )
    decision["model"] = chosen.label
    # 5. The summary with its checks: printed, an artifact, a plot beside the rows.
    plot_path = Path(output).with_suffix(".summary.png")
    plot = analysis.summary_plot(answered, summary, decision["checks"], plot_path)
    markdown = analysis.summary_markdown(summary, decision, output, plot=str(plot))
    print(markdown, flush=True)
    create_markdown_artifact(key="tucano-review-analysis", markdown=markdown)
    # 6. On drift, retraining once per drift, on the data the latest pipeline run trained on
    # (the master data a new month joins), never on the analysed folder: with no run recorded,
    # the retraining deployment's own data.
    if decision["status"] == monitoring.DRIFT:
        run = read_latest_run(store)
        training = {"recipe": recipe_path, "artifacts": artifacts} | (
            {"data": run.data} if run else {}
        )
        decision["retraining"] = monitoring.start_retraining(
            retraining_deployment,
            monitoring.drift_key(chosen.label, [row["review_id"] for row in answered]),
            training,
        )
        log.warning("drift: %s; retraining %s", decision["reason"], decision["retraining"])
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
