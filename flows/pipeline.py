"""The Prefect flows. Each reads as numbered steps; the work lives in tasks/.

Every flow takes the same three inputs (recipe path, artifact store URI, Olist data URI), so each
`tucano` subcommand runs one flow, and a later stage reuses the cached results of the earlier ones
instead of recomputing them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from pydantic import BaseModel, ConfigDict

from configs.recipe import DEFAULT_RECIPE, Recipe, load_recipe
from flows.fanout import gather_adapters, start_seeds
from flows.parameters import DEFAULT_ARTIFACTS, DEFAULT_DATA, portable_path
from flows.side_by_side import Job, run_side_by_side, whole_rounds
from tasks.core.manifests import (
    Adapter,
    AuditResult,
    BaseModelArtifact,
    EvalRows,
    PreparedData,
    ReportArtifact,
)
from tasks.core.progress import duration
from tasks.core.store import ArtifactStore
from tasks.evaluation.audit import audit_gate_task
from tasks.evaluation.champion import timestamp
from tasks.evaluation.evaluate import adds_nothing, answers_path, evaluate_model_task
from tasks.evaluation.report import compare_evaluations_task, publish_report_task, report_task
from tasks.models.model import prepare_base_model_task
from tasks.prep.build import prepare_data_task
from tasks.prep.olist import fingerprint_source
from tasks.training.sft import train_sft_task
from tasks.training.train import seed_finished, train_seed_task

LATEST_RUN = "pipeline/latest.json"


def _open(recipe_path: str, artifacts: str) -> tuple[Recipe, ArtifactStore]:
    return load_recipe(recipe_path), ArtifactStore(artifacts)


def prepare(recipe: Recipe, store: ArtifactStore, data: str) -> PreparedData:
    return prepare_data_task(fingerprint_source(data), recipe.data, store)


def prepare_audited(recipe: Recipe, store: ArtifactStore, data: str) -> PreparedData:
    """Steps 1-2: the prompt sets, once the rewards that will train on them pass the audit
    gate (AuditFailed otherwise: nothing trains on rewards that disagree with people)."""
    prepared = prepare(recipe, store, data)
    audit_gate_task(recipe.audit)
    return prepared


class StageClock:
    """How long each of a run's stages took, in the order they ran."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        yield
        self.seconds[name] = round(time.monotonic() - started, 1)

    def summary(self) -> str:
        total = sum(self.seconds.values()) or 1.0
        return ", ".join(
            f"{name} {duration(seconds)} ({seconds / total:.0%})"
            for name, seconds in self.seconds.items()
        )


class StartingModel(NamedTuple):
    """The model GRPO starts from, and, when the recipe fine-tunes first and
    `evaluation.before_sft` asks, the raw base model that SFT started from (evaluated too, so the
    report shows what SFT did)."""

    model: BaseModelArtifact
    before_sft: BaseModelArtifact | None


def starting_model(recipe: Recipe, store: ArtifactStore, prepared: PreparedData) -> StartingModel:
    base = prepare_base_model_task(recipe.model, prepared, store)
    if not recipe.sft.enabled:
        return StartingModel(base, None)
    # SFT on the train split's reference answers, merged into the weights GRPO starts from.
    model = train_sft_task(recipe.sft, recipe.lora, prepared, base, store, recipe.answer_limit())
    return StartingModel(model, base if recipe.evaluation.before_sft else None)


class Evaluations(NamedTuple):
    start: EvalRows
    tuned: list[EvalRows]
    before_sft: EvalRows | None


def _evaluate(
    recipe: Recipe,
    paths: dict[str, str],
    prepared: PreparedData,
    start: StartingModel,
    adapters: list[Adapter],
) -> Evaluations:
    store = ArtifactStore(paths["artifacts"])

    def evaluate(model: BaseModelArtifact, adapter: Adapter | None, **start: EvalRows) -> EvalRows:
        return evaluate_model_task(recipe.evaluation, prepared, model, adapter, store, **start)

    if recipe.processes > 1:
        # The start and the seeds that changed it answer side by side, those not answered
        # yet; the calls below then find their answers in the store (and answer what was left
        # to this process).
        models = [None, *(adapter for adapter in adapters if not adds_nothing(adapter, store))]
        in_children = whole_rounds(models, recipe.processes)
        jobs = [
            Job(evaluate_model_flow, {**paths, "seed": None if adapter is None else adapter.seed})
            for adapter in in_children
            if not store.exists(answers_path(recipe.evaluation, prepared, start.model, adapter))
        ]
        run_side_by_side(jobs, recipe.processes)
    start_eval = evaluate(start.model, None)
    return Evaluations(
        start=start_eval,
        # A seed that kept its start answers as the start did, without generating again.
        tuned=[evaluate(start.model, adapter, start_rows=start_eval) for adapter in adapters],
        before_sft=evaluate(start.before_sft, None) if start.before_sft else None,
    )


def _report(
    recipe: Recipe,
    store: ArtifactStore,
    prepared: PreparedData,
    start: StartingModel,
    adapters: list[Adapter],
    evaluations: Evaluations,
) -> ReportArtifact:
    report = report_task(
        recipe,
        prepared,
        start.model,
        adapters,
        evaluations.start,
        evaluations.tuned,
        store,
        evaluations.before_sft,
    )
    publish_report_task(report, store)
    get_run_logger().info("report: %s", store.uri(report.report_json))
    return report


@flow(name="tucano-data")
def data_flow(
    recipe_path: str = str(DEFAULT_RECIPE),
    artifacts: str = DEFAULT_ARTIFACTS,
    data: str = DEFAULT_DATA,
) -> PreparedData:
    recipe, store = _open(recipe_path, artifacts)
    # 1. Data prep: schema-checked Olist tables -> four prompt sets, eval split, SQLite copy.
    return prepare(recipe, store, data)


@flow(name="tucano-audit")
def audit_flow(recipe_path: str = str(DEFAULT_RECIPE)) -> AuditResult:
    # 2. Reward audit gate, on the shipped audit set and database: raises AuditFailed when the
    # rewards disagree with the human scores.
    return audit_gate_task(load_recipe(recipe_path).audit)


@flow(name="tucano-train", flow_run_name="train-seed-{seed}")
def train_flow(
    recipe_path: str = str(DEFAULT_RECIPE),
    artifacts: str = DEFAULT_ARTIFACTS,
    data: str = DEFAULT_DATA,
    seed: int = 42,
) -> Adapter:
    recipe, store = _open(recipe_path, artifacts)
    # 1-2. Data prep and the reward audit gate (cached when unchanged).
    prepared = prepare_audited(recipe, store, data)
    # 3. GRPO training of one seed from the start model (the SFT model, with SFT).
    start = starting_model(recipe, store, prepared).model
    return train_seed_task(recipe.training, recipe.lora, prepared, start, seed, store)


@flow(name="tucano-sft")
def sft_flow(
    recipe_path: str = str(DEFAULT_RECIPE),
    artifacts: str = DEFAULT_ARTIFACTS,
    data: str = DEFAULT_DATA,
) -> BaseModelArtifact:
    recipe, store = _open(recipe_path, artifacts)
    # 1-2. Data prep and the reward audit gate (cached when unchanged).
    prepared = prepare_audited(recipe, store, data)
    # 3a. The base model, then SFT on the reference answers: the start model (the base model
    # itself when SFT is off).
    return starting_model(recipe, store, prepared).model


def _through_training(
    paths: dict[str, str],
) -> tuple[Recipe, ArtifactStore, PreparedData, StartingModel, list[Adapter]]:
    """Steps 1-3 for every seed of the recipe: cached results when they exist."""
    recipe, store = _open(paths["recipe_path"], paths["artifacts"])
    prepared = prepare(recipe, store, paths["data"])
    start = starting_model(recipe, store, prepared)
    return recipe, store, prepared, start, train_seeds(recipe, paths, prepared, start.model)


@flow(name="tucano-eval")
def eval_flow(
    recipe_path: str = str(DEFAULT_RECIPE),
    artifacts: str = DEFAULT_ARTIFACTS,
    data: str = DEFAULT_DATA,
) -> Evaluations:
    paths = {"recipe_path": recipe_path, "artifacts": artifacts, "data": data}
    # 1-3. Data, the start model and every seed's adapter (from the cache when already trained).
    recipe, _, prepared, start, adapters = _through_training(paths)
    # 4. Evaluation of the start model and every seed's tuned model on the eval split.
    return _evaluate(recipe, paths, prepared, start, adapters)


def _evaluation_name() -> str:
    seed = flow_run.parameters.get("seed")
    return "evaluate-start" if seed is None else f"evaluate-seed-{seed}"


@flow(name="tucano-evaluate-model", flow_run_name=_evaluation_name)
def evaluate_model_flow(
    recipe_path: str = str(DEFAULT_RECIPE),
    artifacts: str = DEFAULT_ARTIFACTS,
    data: str = DEFAULT_DATA,
    seed: int | None = None,
) -> EvalRows:
    recipe, store = _open(recipe_path, artifacts)
    # 1-3. Data, the model GRPO started from and the seed's adapter (all cached when done).
    prepared = prepare(recipe, store, data)
    start = starting_model(recipe, store, prepared).model
    adapter = None
    if seed is not None:
        adapter = train_seed_task(recipe.training, recipe.lora, prepared, start, seed, store)
    # 4. That one model (the start with no seed) on the eval split.
    return evaluate_model_task(recipe.evaluation, prepared, start, adapter, store)


@flow(name="tucano-compare")
def compare_flow(
    recipe_path: str = str(DEFAULT_RECIPE),
    artifacts: str = DEFAULT_ARTIFACTS,
    data: str = DEFAULT_DATA,
) -> ReportArtifact:
    paths = {"recipe_path": recipe_path, "artifacts": artifacts, "data": data}
    # 1-3. Data, the start model and every seed's adapter (from the cache when already trained).
    recipe, store, prepared, start, adapters = _through_training(paths)
    # 4-6. Evaluation (cached when done), Wilcoxon comparison per task and overall, report.
    evaluations = _evaluate(recipe, paths, prepared, start, adapters)
    return _report(recipe, store, prepared, start, adapters, evaluations)


@flow(name="tucano-compare-evaluations")
def compare_evaluations_flow(
    base_eval: str,
    candidate_eval: str,
    recipe_path: str = str(DEFAULT_RECIPE),
    artifacts: str = DEFAULT_ARTIFACTS,
) -> ReportArtifact:
    recipe, store = _open(recipe_path, artifacts)
    # 5-6. Wilcoxon comparison of two saved evaluations, by prompt id, and its report.
    report = compare_evaluations_task(base_eval, candidate_eval, recipe.compare, store)
    publish_report_task(report, store)
    return report


def train_seeds(
    recipe: Recipe,
    paths: dict[str, str],
    prepared: PreparedData,
    base: BaseModelArtifact,
    *,
    training_deployment: str | None = None,
    resume_wait_s: float = 0,
) -> list[Adapter]:
    """Every seed of the recipe as its own flow run: a subflow here, or a run of the training
    deployment (on its work pool), all started at once and all waited for."""
    if training_deployment is None:
        if recipe.processes > 1:
            # Side by side; the runs below then find each seed's adapter in the store, and
            # train those left to this process.
            store = ArtifactStore(paths["artifacts"])
            jobs = [
                Job(train_flow, {**paths, "seed": seed})
                for seed in whole_rounds(recipe.seeds, recipe.processes)
                if not seed_finished(recipe.training, recipe.lora, prepared, base, seed, store)
            ]
            run_side_by_side(jobs, recipe.processes)
        return [train_flow(**paths, seed=seed) for seed in recipe.seeds]
    parameters = {
        seed: {
            "run": {
                # The recipe and the data are the code's: read in the worker's own checkout.
                # The store is the one place every worker shares.
                "recipe": portable_path(paths["recipe_path"]),
                "artifacts": paths["artifacts"],
                "data": portable_path(paths["data"]),
                "seed": seed,
            }
        }
        for seed in recipe.seeds
    }
    runs = start_seeds(training_deployment, parameters, group=str(flow_run.get_id()))
    return gather_adapters(runs.values(), ArtifactStore(paths["artifacts"]), resume_wait_s)


class PipelineResult(NamedTuple):
    """What a whole pipeline run made, for the flows that go on from it (retraining)."""

    recipe: Recipe
    store: ArtifactStore
    prepared: PreparedData
    base: BaseModelArtifact
    adapters: list[Adapter]
    report: ReportArtifact


class PipelineRecord(BaseModel):
    """What the latest complete pipeline run in a store trained on and made. Production reads its
    models from here while no champion is promoted (never by preparing the reviews it analyses),
    and a drift retrains on its data."""

    model_config = ConfigDict(frozen=True)

    finished_at: str
    recipe: str
    # The Olist folder it trained on (a local one made absolute): the deployment's master data.
    data: str
    prepared: PreparedData
    # The model GRPO started from (the SFT model with SFT), which every adapter is trained on.
    base: BaseModelArtifact
    adapters: list[Adapter]
    report: str
    # Seconds each stage of this run took, in the order they ran (a cached stage about none).
    stage_seconds: list[tuple[str, float]] = []


def read_latest_run(store: ArtifactStore) -> PipelineRecord | None:
    if not store.exists(LATEST_RUN):
        return None
    return PipelineRecord.model_validate(store.read_json(LATEST_RUN))


def run_pipeline(
    paths: dict[str, str], *, training_deployment: str | None = None, resume_wait_s: float = 900
) -> PipelineResult:
    recipe, store = _open(paths["recipe_path"], paths["artifacts"])
    clock = StageClock()
    # 1-2. Data prep, and the reward audit gate that stops the run before any training.
    with clock.stage("data prep"):
        prepared = prepare(recipe, store, paths["data"])
    with clock.stage("reward audit"):
        audit_gate_task(recipe.audit)
    # 3. SFT when the recipe has it, then GRPO: one flow run per seed.
    with clock.stage("base model and SFT"):
        start = starting_model(recipe, store, prepared)
    with clock.stage("GRPO"):
        adapters = train_seeds(
            recipe,
            paths,
            prepared,
            start.model,
            training_deployment=training_deployment,
            resume_wait_s=resume_wait_s,
        )
    # 4-6. Evaluation of the start model and the tuned ones, Wilcoxon comparison, report.
    with clock.stage("evaluation"):
        evaluations = _evaluate(recipe, paths, prepared, start, adapters)
    with clock.stage("report"):
        report = _report(recipe, store, prepared, start, adapters, evaluations)
    get_run_logger().info("stage times: %s", clock.summary())
    # 7. The record production and retraining go on from, written only once all of it exists.
    data = paths["data"] if "://" in paths["data"] else str(Path(paths["data"]).resolve())
    record = PipelineRecord(
        finished_at=timestamp(),
        recipe=recipe.name,
        data=data,
        prepared=prepared,
        base=start.model,
        adapters=adapters,
        report=report.report_json,
        stage_seconds=list(clock.seconds.items()),
    )
    store.write_json(LATEST_RUN, record.model_dump(mode="json"))
    return PipelineResult(recipe, store, prepared, start.model, adapters, report)


@flow(name="tucano-pipeline")
def pipeline_flow(
    recipe_path: str = str(DEFAULT_RECIPE),
    artifacts: str = DEFAULT_ARTIFACTS,
    data: str = DEFAULT_DATA,
    training_deployment: str | None = None,
    resume_wait_s: float = 900,
) -> ReportArtifact:
    paths = {"recipe_path": recipe_path, "artifacts": artifacts, "data": data}
    # 1-6. Data, audit gate, GRPO per seed, evaluation, comparison, report.
    return run_pipeline(
        paths, training_deployment=training_deployment, resume_wait_s=resume_wait_s
    ).report
