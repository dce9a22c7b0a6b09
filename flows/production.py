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
from flows.pipeline import (
    DEFAULT_ARTIFACTS,
    DEFAULT_DATA,
    LATEST_RUN,
    PipelineRecord,
    _open,
    read_latest_run,
)
from tasks.core.manifests import Adapter, BaseModelArtifact, PreparedData
from tasks.core.store import ArtifactStore, digest_folder
from tasks.evaluation import champion as champions
from tasks.evaluation.evaluate import evaluate_model_task, load_with_adapter
from tasks.production import analyze as analysis
from tasks.production import checks, monitoring
from tasks.production.export import CARD_FILE, export_model

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
    """The champion (the latest pipeline run's starting model while none is promoted), seed N of
    the latest pipeline run, an adapter folder on that run's starting model, or a folder
    `tucano export` wrote, as it is."""
    if spec == CHAMPION:
        return _champion(store)
    folder = Path(spec)
    if (folder / CARD_FILE).is_file():
        return _exported(folder, store)
    seed = int(spec[5:]) if spec.startswith("seed-") and spec[5:].isdigit() else None
    if seed is None and not (folder / "adapter_config.json").is_file():
        raise ModelChoiceError(
            f"--model {spec}: not 'champion', 'seed-N', a folder with adapter_config.json or a "
            f"model folder `tucano export` wrote (with {CARD_FILE})"
        )
    run = _latest_run(spec, store)
    if seed is not None:
        adapter = next((a for a in run.adapters if a.seed == seed), None)
        if adapter is None:
            raise ModelChoiceError(
                f"--model {spec}: the latest pipeline run in {store.uri(LATEST_RUN)} "
                f"({run.finished_at}, recipe {run.recipe}) trained seeds "
                f"{', '.join(str(a.seed) for a in run.adapters)}; add {seed} to the recipe's "
                f"seeds and run `tucano pipeline`, or run `tucano train --seed {seed}` and pass "
                "the adapter folder it prints as --model"
            )
        label = f"seed {seed} adapter {adapter.folder}"
        return ProductionModel(run.base, adapter, label, run.prepared, None)
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
            f"({store.uri(LATEST_RUN)} does not exist); train them with `make pipeline` or "
            f"`tucano pipeline --artifacts {store.root_uri}`"
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
    config: str = str(DEFAULT_RECIPE),
    artifacts: str = DEFAULT_ARTIFACTS,
) -> str:
    recipe, store = _open(config, artifacts)
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
    config: str = str(DEFAULT_RECIPE),
    artifacts: str = DEFAULT_ARTIFACTS,
    data: str = DEFAULT_DATA,
    limit: int | None = None,
    retraining_deployment: str = DEFAULT_RETRAINING,
) -> dict[str, Any]:
    recipe, store = _open(config, artifacts)
    log = get_run_logger()
    # 1. The reviews' prompts: a bad file stops here, naming it, before any model is loaded.
    reviews = analysis.review_prompts(data)
    # 2. The production model, from the store, and the orders it must not be judged on again.
    chosen = production_model(model, store)
    excluded = _seen_orders(store, chosen)
    prompts = [prompt for prompt in reviews if prompt["order_id"] not in excluded][:limit]
    log.info("%d new reviews (%d orders excluded as seen)", len(prompts), len(excluded))
    # 3. Every new review through it, resuming after the rows already written.
    loaded, tokenizer = load_with_adapter(chosen.base, chosen.adapter, store)
    rows = analysis.analyze(loaded, tokenizer, prompts, recipe.evaluation, Path(output))
    # 4. The checks, against the same model's answers on the eval split it was judged on.
    summary = analysis.summarize(rows)
    if not rows:
        print(analysis.summary_markdown(summary, None, output, plot=None), flush=True)
        return {"summary": summary, "monitoring": None}
    reference = checks.eval_answers(
        _eval_rows(recipe, chosen, store), store.read_jsonl(chosen.judged_on.eval)
    )
    answers = [
        checks.Answer.of(row["completion"], row["truncated"], row.get("review_score"), row["total"])
        for row in rows
    ]
    decision = monitoring.drift_decision(
        answers, reference, recipe.monitoring, recipe.compare.alpha
    )
    decision["model"] = chosen.label
    # 5. The summary with its checks: printed, an artifact, a plot beside the rows.
    plot_path = Path(output).with_suffix(".summary.png")
    plot = analysis.summary_plot(rows, summary, decision["checks"], plot_path)
    markdown = analysis.summary_markdown(summary, decision, output, plot=str(plot))
    print(markdown, flush=True)
    create_markdown_artifact(key="tucano-review-analysis", markdown=markdown)
    # 6. On drift, retraining once per drift, on the data the latest pipeline run trained on
    # (the master data a new month joins), never on the analysed folder: with no run recorded,
    # the retraining deployment's own data.
    if decision["status"] == monitoring.DRIFT:
        run = read_latest_run(store)
        training = {"recipe": config, "artifacts": artifacts} | ({"data": run.data} if run else {})
        decision["retraining"] = monitoring.start_retraining(
            retraining_deployment,
            monitoring.drift_key(chosen.label, [row["review_id"] for row in rows]),
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
