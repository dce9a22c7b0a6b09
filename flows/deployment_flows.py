"""The flows behind the deployments in deployments/prefect.yaml. Each takes one pydantic model
(rendered by the Prefect UI as a validated form) and keeps its results in the artifact store.

- seeded-training: one seed's GRPO; a preempted run ends Crashed so that it is resumed.
- pipeline: the whole DAG, seeds fanned out as seeded-training runs.
- scheduled-retraining: retrain when the data changed, promote only a better model.
- resume-training: started by an automation when a seeded-training run crashes.
- review-analysis: daily, the production model reads new reviews; a drift retrains.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from typing import Any
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.artifacts import create_table_artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
from prefect.concurrency.sync import concurrency
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectAlreadyExists
from prefect.runtime import flow_run
from prefect.states import Crashed, State

from configs.recipe import load_recipe
from flows.fanout import RESUME_TAG, handoff_path
from flows.parameters import AnalysisRun, PipelineRun, RetrainingRun, TrainingRun, project_path
from flows.pipeline import prepare, run_pipeline, train_flow
from flows.production import analyze_flow
from flows.storage import in_store
from tasks.core.manifests import Adapter, ReportArtifact
from tasks.core.signals import Stopped
from tasks.core.store import ArtifactStore
from tasks.evaluation import champion as champions
from tasks.evaluation.evaluate import evaluate_model_task
from tasks.prep.olist import fingerprint_source

# The shortest lease Prefect grants (its server refuses less), renewed by Prefect every 45 s while
# the run lives: a run killed without a word (SIGKILL, OOM, a VM gone) holds its seed's slot until
# the lease runs out, and the seed's next run (its resumed attempt) waits that long.
SEED_SLOT_LEASE_S = 60


def seed_limit(store: ArtifactStore, seed: int) -> str:
    """The Prefect global concurrency limit (one slot) of one seed's training on one store,
    created when missing: `concurrency` on a limit that does not exist limits nothing."""
    store_digest = hashlib.sha256(store.root_uri.encode()).hexdigest()[:8]
    name = f"tucano-train-{store_digest}-seed-{seed}"
    limit = GlobalConcurrencyLimitCreate(name=name, limit=1)
    with get_client(sync_client=True) as client, contextlib.suppress(ObjectAlreadyExists):
        # It exists when an earlier run made it, or a run started beside this one did.
        client.create_global_concurrency_limit(limit)
    return name


@contextlib.contextmanager
def seed_slot(store: ArtifactStore, seed: int) -> Iterator[None]:
    """Hold the seed's one slot: two runs of one seed on one store (two Submits in the UI) queue
    in Prefect, the second shown waiting, instead of both starting. The lock in the store
    (`train_seed`) is what keeps them from training at once wherever they run; this keeps the
    second from even starting its data prep, and shows why it waits."""
    with concurrency(seed_limit(store, seed), occupy=1, lease_duration=SEED_SLOT_LEASE_S):
        yield


def _train_in_turn(store: ArtifactStore, paths: dict[str, str], seed: int) -> Adapter:
    with seed_slot(store, seed):
        return in_store(train_flow, store)(**paths, seed=seed)


@flow(name="tucano-seeded-training", flow_run_name="seed-{run.seed}-attempt-{run.attempt}")
def seeded_training(run: TrainingRun) -> Adapter | State:
    paths = run.paths()
    store = ArtifactStore(paths["artifacts"])
    # 1-3. Data (cached), audit gate, GRPO for this seed, resuming from its newest checkpoint.
    try:
        adapter = _train_in_turn(store, paths, run.seed)
    except Stopped as exc:
        # The machine is going away (spot notice): end Crashed, the state automatic resume
        # answers, with the checkpoint just saved.
        return Crashed(message=f"preempted: {exc}")
    # 4. Hand the adapter to whoever waits for this run (the pipeline), through the store.
    store.write_json(handoff_path(flow_run.get_id()), adapter.model_dump(mode="json"))
    return adapter


@flow(name="tucano-deployed-pipeline")
def pipeline(run: PipelineRun) -> ReportArtifact:
    store = ArtifactStore(run.paths()["artifacts"])
    # 1-6. The DAG; step 3 starts one seeded-training run per seed and waits for all.
    return in_store(_pipeline_steps, store)(run)


@flow(name="tucano-pipeline-steps")
def _pipeline_steps(run: PipelineRun) -> ReportArtifact:
    return run_pipeline(
        run.paths(),
        training_deployment=run.training_deployment or None,
        resume_wait_s=run.resume_wait_s,
    ).report


@flow(name="tucano-scheduled-retraining")
def scheduled_retraining(run: RetrainingRun) -> dict[str, Any]:
    store = ArtifactStore(run.paths()["artifacts"])
    return in_store(_retraining_steps, store)(run)


@flow(name="tucano-retraining-steps")
def _retraining_steps(run: RetrainingRun) -> dict[str, Any]:
    paths = run.paths()
    store = ArtifactStore(paths["artifacts"])
    log = get_run_logger()
    # 1. Has anything changed since the last successful retraining (data, or the recipe)?
    source = fingerprint_source(paths["data"])
    state = champions.training_state(source.fingerprint, paths["recipe_path"])
    if store.exists(champions.LAST_TRAINED) and store.read_json(champions.LAST_TRAINED) == state:
        decision = champions.new_decision(
            "unchanged", "data and recipe unchanged since the last retraining", source.fingerprint
        )
        champions.record_decision_task(decision, store)
        log.info("nothing changed since the last retraining: no training")
        return decision
    # 2. The new eval split must hold no prompt that any champion trained on (it would be scored
    # on its own training prompts): refused before anything trains, the reason recorded.
    new_eval = store.read_jsonl(
        prepare(load_recipe(paths["recipe_path"]), store, paths["data"]).eval
    )
    trained_on = champions.eval_prompts_trained_on(
        champions.champion_history(store), new_eval, store
    )
    if trained_on:
        reason = champions.refusal_reason(trained_on)
        decision = champions.new_decision(
            "refused", reason, source.fingerprint, trained_on_eval_prompts=trained_on
        )
        champions.record_decision_task(decision, store)
        log.error("retraining refused: %s", reason)
        return decision
    # 3-7. The whole pipeline on the new data: every seed trained, evaluated, compared with the
    # start model.
    made = run_pipeline(
        paths,
        training_deployment=run.training_deployment or None,
        resume_wait_s=run.resume_wait_s,
    )
    # 8. The challenger (best seed on held-out prompts) against the champion (the start model
    # before any promotion), both evaluated on the new eval split.
    recipe, prepared = made.recipe, made.prepared
    challenger = champions.Champion(
        base=made.base,
        adapter=champions.best_seed(made.adapters),
        promoted_at=champions.timestamp(),
        data_fingerprint=source.fingerprint,
        recipe=recipe.name,
        trained_on=prepared,
    )
    champion = champions.read_champion(store) or challenger.model_copy(update={"adapter": None})
    evaluations = [
        evaluate_model_task(recipe.evaluation, prepared, model.base, model.adapter, store)
        for model in (champion, challenger)
    ]
    rows = [store.read_jsonl(e.rows) for e in evaluations]
    # 9. Promote only when significantly better where the recipe says, and worse nowhere.
    verdict = champions.decide(rows[0], rows[1], recipe.retraining, recipe.compare.alpha)
    if verdict["promote"]:
        champions.promote(challenger, store)
    decision = champions.new_decision(
        "promoted" if verdict["promote"] else "kept champion",
        verdict["reason"],
        source.fingerprint,
        champion=champion.label,
        challenger=challenger.label,
        report=store.uri(made.report.report_json),
        **{k: v for k, v in verdict.items() if k not in ("promote", "reason")},
    )
    champions.record_decision_task(decision, store)
    # 10. Remember what was trained on, so an unchanged source is not trained again.
    store.write_json(champions.LAST_TRAINED, state)
    return decision


@flow(name="tucano-review-analysis")
def review_analysis(run: AnalysisRun) -> dict[str, Any]:
    store = ArtifactStore(run.paths()["artifacts"])
    # 1-5. Analyse the new reviews, summarise, check for drift, retrain on drift (once).
    return in_store(analyze_flow, store)(
        **run.paths(),
        output=project_path(run.output),
        model=run.model,
        limit=run.limit,
        retraining_deployment=run.retraining_deployment,
    )


@flow(name="tucano-resume-training")
def resume_training(flow_run_id: str) -> str:
    """Start the next attempt of a crashed seeded-training run, with the same parameters."""
    crashed_id = UUID(flow_run_id.removeprefix("prefect.flow-run."))
    with get_client(sync_client=True) as client:
        crashed = client.read_flow_run(crashed_id)
    # 1. Only a crash is resumed: a failure (bad recipe, a bug) or a cancellation is not.
    if crashed.state is None or not crashed.state.is_crashed():
        return _resume_record(crashed, "not resumed: the run did not crash")
    run = TrainingRun.model_validate(crashed.parameters["run"])
    # 2. Bounded: after max_attempts runs, a person has to look.
    if run.attempt >= run.max_attempts:
        return _resume_record(crashed, f"not resumed: {run.attempt} of {run.max_attempts} runs")
    # 3. The same deployment and parameters, the next attempt; the idempotency key makes a
    # second trigger for the same crash start nothing new.
    next_run = run_deployment(
        crashed.deployment_id,
        parameters={"run": run.model_copy(update={"attempt": run.attempt + 1}).model_dump()},
        timeout=0,
        as_subflow=False,
        idempotency_key=f"{RESUME_TAG}{crashed.id}",
        tags=[
            *(tag for tag in crashed.tags if not tag.startswith(RESUME_TAG)),
            f"{RESUME_TAG}{crashed.id}",
        ],
    )
    return _resume_record(crashed, f"resumed as flow run {next_run.id}, attempt {run.attempt + 1}")


def _resume_record(crashed: Any, outcome: str) -> str:
    create_table_artifact(
        key="tucano-resume",
        table=[
            {
                "crashed_run": str(crashed.id),
                "name": crashed.name,
                "state": crashed.state.name if crashed.state else None,
                "message": crashed.state.message if crashed.state else None,
                "outcome": outcome,
            }
        ],
        description="Automatic resume of a crashed training run.",
    )
    get_run_logger().info("%s: %s", crashed.name, outcome)
    return outcome
