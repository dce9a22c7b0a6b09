"""Step 3: GRPO with TRL's GRPOTrainer and a PEFT LoRA adapter, one seed per call.

Generation settings always come from the recipe and are passed to TRL explicitly: a model's own
generation_config.json (temperature 0.1 in V4.2's first run) never decides how rollouts sample.
Checkpoints go into the artifact store as they are saved, each complete or invisible.
"""

from __future__ import annotations

import functools
import logging
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from prefect import task

from configs.recipe import LoraConfig, TrainingConfig
from rewards import RewardFunction, TokenBudget, trl_component_functions, trl_reward_functions
from tasks.core import signals
from tasks.core.caching import ContentKey, identity_key, task_code_digest
from tasks.core.locks import StoreLock
from tasks.core.manifests import Adapter, BaseModelArtifact, PreparedData, TrainingRecord
from tasks.core.memory import returns_memory
from tasks.core.store import ArtifactStore
from tasks.models.backends import (
    UNSLOTH,
    bf16_training,
    load_policy,
    longest_prompt,
    machine_backend,
)
from tasks.training.checkpoints import RunCheckpoints, checkpoint_step, train_from
from tasks.training.grpo_trainer import grpo_trainer_class
from tasks.training.heldout_readings import with_reading_counts
from tasks.training.prompt_order import Stratum, stratified_stream, stratum
from tasks.training.stopping import StopRules
from tasks.training.untrained_tasks import UntrainedTasks, untrained_rows

if TYPE_CHECKING:
    from tasks.training.grpo_callbacks import KeepBest

log = logging.getLogger("tucano.train")


def run_key(
    training: TrainingConfig,
    lora: LoraConfig,
    data: PreparedData,
    base: BaseModelArtifact,
    seed: int,
    backend: str,
) -> str:
    """Names one training run: same recipe, data, base model, seed, backend and code -> same key.
    The backend is the resolved one: Unsloth's kernels and PEFT's differ numerically, so a run
    never resumes from the other's checkpoints. The code is in it so that a changed trainer
    starts afresh instead of resuming a finished run and handing back its old adapter."""
    identity = {
        "backend": backend,
        "code": task_code_digest(__name__),
        "training": training.model_dump(mode="json"),
        "lora": lora.model_dump(mode="json"),
        "data": data.fingerprint,
        "base": base.fingerprint,
        "seed": seed,
    }
    return identity_key(identity)


# Recipe fields that are GRPOConfig fields of the same name and meaning.
GRPO_PASSTHROUGH = (
    "learning_rate", "lr_scheduler_type", "beta", "scale_rewards", "loss_type", "epsilon",
    "epsilon_high", "mask_truncated_completions", "multi_objective_aggregation",
    "num_generations", "max_completion_length", "temperature", "top_p", "max_steps",
    "save_steps", "logging_steps", "entropy_coef", "use_adaptive_entropy", "entropy_coef_min",
    "entropy_coef_max", "entropy_coef_delta", "entropy_target",
)  # fmt: skip


def grpo_config(
    training: TrainingConfig, seed: int, output_dir: Path, *, resuming: bool = False
) -> Any:
    """TRL's config for one seed. A fresh run evaluates the held-out prompts before its first
    step, so the report shows where GRPO started and the best adapter can be the unchanged
    start when no step beat it; a resumed run had that eval already (its RNG state follows it)."""
    import torch
    from trl import GRPOConfig

    on_gpu = torch.cuda.is_available()
    step = training.prompts_per_step * training.num_generations
    rows = training.update_rows or step
    return GRPOConfig(
        output_dir=str(output_dir),
        seed=seed,
        data_seed=seed,
        **training.model_dump(include=set(GRPO_PASSTHROUGH)),
        warmup_steps=training.warmup_ratio,
        # A step's completions (prompts_per_step groups of num_generations) are generated at
        # once and updated in passes of update_rows, accumulated into one optimizer step.
        per_device_train_batch_size=rows,
        gradient_accumulation_steps=step // rows,
        # A stratified run hands TRL its prompts already in order.
        shuffle_dataset=training.prompt_order == "shuffled",
        # Sampling is the recipe's alone: no top-k from the model's generation_config.json.
        top_k=0,
        save_strategy="steps",
        eval_strategy="steps" if training.heldout_prompts else "no",
        eval_steps=training.eval_steps,
        eval_on_start=bool(training.heldout_prompts) and not resuming,
        num_generations_eval=training.num_generations_eval,
        per_device_eval_batch_size=training.num_generations_eval
        * (training.heldout_batch_prompts or training.prompts_per_step),
        # Only the newest local copy is kept; the store keeps `keep_checkpoints` of them.
        save_total_limit=1,
        report_to=[],
        bf16=bf16_training(training.cpu_bf16),
        gradient_checkpointing=training.gradient_checkpointing,
        use_cpu=not on_gpu,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def reward_functions(
    training: TrainingConfig, database: str, tokenizer: Any
) -> list[RewardFunction]:
    """GDPO (per-component normalisation) needs the components as separate functions; V4.2's
    summed reward needs one total per task. A rollout cut at max_completion_length is scored as
    cut, as evaluation scores it. Extraction's also logs how the sentiments read the stars and how
    many stated problems the answers flag."""
    budget = TokenBudget(training.max_completion_length, frozenset({tokenizer.eos_token_id}))
    if training.multi_objective_aggregation == "normalize_then_sum":
        return with_reading_counts(trl_component_functions(database, budget))
    return with_reading_counts(trl_reward_functions(database, budget))


def split_heldout(
    rows: list[dict[str, Any]], heldout: int, task_shares: dict[str, float] | None = None
) -> tuple[list, list]:
    """`heldout` train prompts held out for the periodic eval (the final eval split is never seen
    in training): of each task its share (`task_shares`, as the steps are dealt, so that the
    adapter is chosen on the tasks it is trained on in those shares) or as many as among the
    file's last `heldout` (it is shuffled), and of
    a task's reviews, from the end, each star group (1-2, 3, 4-5) and within it the reviews that
    state a problem and those that do not (prompt_order.stratum) in its share of the task's
    reviews, as the eval split holds them (one hash deals both). The adapter kept is the one the
    held-out reward chose, and the verdict is the eval split's: held out in other shares, the
    two disagree on which step is better (the runs: CHANGELOG.md, "The runs behind the default
    recipe", `training.heldout_prompts`). A sentiment said to every review is the stop rules' to
    refuse (stopping.py), whatever the mix. A train prompt on the
    same input as a held-out one (its data summary, its review: `source`) is not trained on
    either: a summary is asked with up to five focuses, and a table trained under one focus
    answers its held-out twin from memory, which the eval split's unseen tables cannot."""
    if heldout >= len(rows):
        raise ValueError(
            f"training.heldout_prompts={heldout} leaves no train prompts of {len(rows)}"
        )
    chosen: set[int] = set()
    per_task = (
        _shares_of({task: round(share * 1_000_000) for task, share in task_shares.items()}, heldout)
        if task_shares
        else Counter(row["task"] for row in rows[len(rows) - heldout :])
    )
    for task_name, count in per_task.items():
        strata: dict[Stratum, list[int]] = {}
        for index in reversed(range(len(rows))):
            if rows[index]["task"] == task_name:
                strata.setdefault(stratum(rows[index], split_stated=True), []).append(index)
        for group, quota in _shares_of(
            {group: len(members) for group, members in strata.items()}, count
        ).items():
            chosen.update(strata[group][:quota])
    held_sources = {source(rows[index]) for index in chosen}
    kept = [
        row
        for index, row in enumerate(rows)
        if index not in chosen and source(row) not in held_sources
    ]
    if not kept:
        raise ValueError(
            f"training.heldout_prompts={heldout} holds out the input of every one of the "
            f"{len(rows)} train prompts (their data summaries or reviews): none is left to train on"
        )
    return kept, [rows[index] for index in sorted(chosen)]


# What a prompt is asked about, where two prompts can share it: an insights summary is asked with
# several focuses.
SOURCE_FIELDS = ("data_summary", "review_id")


def source(row: dict[str, Any]) -> str:
    """The input a prompt is asked about: its data summary or review, else the prompt itself."""
    return next(
        (f"{field}:{row[field]}" for field in SOURCE_FIELDS if row.get(field)),
        f"prompt_id:{row['prompt_id']}",
    )


def _shares_of(sizes: dict[Any, int], count: int) -> dict[Any, int]:
    """`count` dealt over groups of these sizes in proportion to them: each its whole part, then
    one more to the largest remainders (ties to the larger group), so the parts add up to
    `count`. No group gets more than it holds while `count` is below their sum."""
    total = sum(sizes.values())
    whole = {group: count * size // total for group, size in sizes.items()}
    by_remainder = sorted(sizes, key=lambda group: (-(count * sizes[group] % total), -sizes[group]))
    for group in by_remainder[: count - sum(whole.values())]:
        whole[group] += 1
    return whole


FINAL_FOLDER = "final"
RUNS = "runs"
# The finished run's record (its adapter, what it started from), written last: the run finished
# when it exists.
RECORD_FILE = "record.json"


def run_folder(key: str) -> str:
    return f"{RUNS}/{key}"


@dataclass(frozen=True)
class SeedRun:
    """One seed's run as its steps share it: the built trainer, the callbacks whose state decides
    the outcome, and where the run lives (its store folder, a local working folder)."""

    seed: int
    key: str
    backend: str
    store: ArtifactStore
    folder: str
    checkpoints: RunCheckpoints
    workdir: Path
    resume: Path | None
    trainer: Any
    keep_best: KeepBest


def step_prompts(
    training: TrainingConfig, train_rows: list[dict[str, Any]], seed: int
) -> list[dict[str, Any]]:
    """The train prompts as the trainer's steps take them: TRL shuffles them itself, or, with
    `prompt_order: stratified`, every prompt the run's steps need in stratified order."""
    if training.prompt_order == "shuffled":
        return train_rows
    return stratified_stream(
        train_rows,
        f"{seed}/steps",
        training.max_steps * training.prompts_per_step,
        training.stated_share,
        training.task_shares,
    )


def _prompt_stream(
    training: TrainingConfig, train_rows: list[dict[str, Any]], seed: int, resume: Path | None
) -> tuple[dict[str, Any], list[Any]]:
    """With dynamic sampling, the trainer's extra arguments and stateful callback: the stream
    of prompts it refills batches from, whose position each checkpoint keeps. Without it, none."""
    from tasks.training import dynamic_sampling

    if not training.dynamic_sampling.enabled:
        return {}, []

    stream = dynamic_sampling.PromptStream(
        train_rows,
        seed,
        resume,
        stratified=training.prompt_order == "stratified",
        stated_share=training.stated_share,
        task_shares=training.task_shares,
    )
    extra = {"prompt_stream": stream, "max_refills": training.dynamic_sampling.max_refills}
    return extra, [dynamic_sampling.SaveStreamPosition(stream)]


class _Callbacks(NamedTuple):
    all: list[Any]  # the stateful ones first, so their state is in a checkpoint before upload
    keep_best: KeepBest
    trainer_arguments: dict[str, Any]  # dynamic sampling's prompt stream, when it is on


def _callbacks(
    training: TrainingConfig,
    functions: list[RewardFunction],
    train_rows: list[dict[str, Any]],
    seed: int,
    checkpoints: RunCheckpoints,
    folder: str,
    resume: Path | None,
) -> _Callbacks:
    """The run's callbacks, each restored from the checkpoint it resumes from."""
    from tasks.training import checkpoint_callbacks, grpo_callbacks, step_log

    rules = stop_rules(training)
    keep_best = grpo_callbacks.KeepBest(rules, checkpoints, checkpoints.store, folder, resume)
    extra, sampling_callbacks = _prompt_stream(training, train_rows, seed, resume)
    stateful: list[Any] = [keep_best, *sampling_callbacks]
    if training.task_weighting.enabled:
        stateful.append(grpo_callbacks.task_weighting(training.task_weighting, functions, resume))
    every = [
        *stateful,
        checkpoint_callbacks.UploadCheckpoints(checkpoints),
        grpo_callbacks.LogSteps(),
        step_log.ReportProgress(f"GRPO seed {seed}"),
        checkpoint_callbacks.StopOnSignal(),
    ]
    return _Callbacks(every, keep_best, extra)


def build_trainer(
    training: TrainingConfig,
    lora: LoraConfig,
    data: PreparedData,
    base: BaseModelArtifact,
    seed: int,
    store: ArtifactStore,
    workdir: Path,
) -> SeedRun:
    """The seed's GRPO trainer with its policy, rewards, data and callbacks, restored from the
    run's newest checkpoint in the store when there is one."""
    backend = machine_backend(training.backend)
    if backend == UNSLOTH:
        # Before anything loads transformers (the tokenizer that sizes the sequences does):
        # Unsloth patches transformers, PEFT and TRL when imported first, else warns and runs
        # slower.
        import unsloth  # noqa: F401
    key = run_key(training, lora, data, base, seed, backend)
    every_task = store.read_jsonl(data.train)
    all_rows = [row for row in every_task if row["task"] in training.tasks]
    train_rows, heldout_rows = split_heldout(
        all_rows, training.heldout_prompts, training.task_shares
    )
    prompt_width = longest_prompt(base, store, [row["prompt"] for row in all_rows])
    # Loaded before anything imports trl: Unsloth patches it on import.
    max_seq_length = prompt_width + training.max_completion_length
    policy = load_policy(backend, base, lora, seed, max_seq_length, store)

    from datasets import Dataset
    from transformers import set_seed
    from transformers.trainer_callback import PrinterCallback

    database = str(data.local_database(store))
    functions = reward_functions(training, database, policy.tokenizer)
    guarded = untrained_rows(every_task, training) if heldout_rows else []
    untrained = UntrainedTasks(guarded, training, database, seed) if guarded else None
    folder = run_folder(key)
    checkpoints = RunCheckpoints(store, f"{folder}/checkpoints", training.keep_checkpoints)
    output_dir = workdir / "checkpoints"
    resume = checkpoints.restore_latest(output_dir)
    callbacks = _callbacks(training, functions, train_rows, seed, checkpoints, folder, resume)
    trainer_class = grpo_trainer_class(training, untrained, prompt_width, seed)
    # GRPOTrainer draws the LoRA initialisation before it seeds anything: without this, the
    # adapter's A matrices came from whatever the process had drawn before (a cached SFT model
    # drew nothing), and the same run gave different gradients from step 1.
    set_seed(seed)
    trainer = trainer_class(
        model=policy.model,
        reward_funcs=functions,
        args=grpo_config(training, seed, output_dir, resuming=resume is not None),
        train_dataset=Dataset.from_list(step_prompts(training, train_rows, seed)),
        eval_dataset=Dataset.from_list(heldout_rows) if heldout_rows else None,
        processing_class=policy.tokenizer,
        peft_config=policy.peft_config,
        callbacks=callbacks.all,
        **callbacks.trainer_arguments,
    )
    for callback in callbacks.all:
        if hasattr(callback, "attach"):
            callback.attach(trainer)
    # The default printer dumps every metric dict to stdout; LogSteps says what matters.
    trainer.remove_callback(PrinterCallback)
    return SeedRun(
        seed=seed,
        key=key,
        backend=backend,
        store=store,
        folder=folder,
        checkpoints=checkpoints,
        workdir=workdir,
        resume=resume,
        trainer=trainer,
        keep_best=callbacks.keep_best,
    )


def run_trainer(run: SeedRun) -> None:
    """Train to the end, from the restored checkpoint if any, and put the final adapter into the
    store; a SIGTERM or SIGINT ends the run after the step in progress, its checkpoint saved, or
    abandons that step at the signals' deadline; the next run resumes from the newest checkpoint."""
    log.info(
        "training seed %d (run %s, %s backend) for %d steps%s",
        run.seed,
        run.key,
        run.backend,
        run.trainer.args.max_steps,
        f", resuming at step {checkpoint_step(run.resume)}" if run.resume else "",
    )
    kept = functools.partial(run.checkpoints.kept, f"seed {run.seed}")
    with signals.keeping(kept), signals.deferred():
        train_from(run.trainer, run.resume)
    signals.stop_if_requested(kept())
    final = run.workdir / FINAL_FOLDER
    run.trainer.save_model(str(final))
    run.store.put_dir(final, f"{run.folder}/{FINAL_FOLDER}")


def export_adapter(run: SeedRun) -> Adapter:
    """The run's adapter: the best by held-out reward, the final one when nothing was evaluated;
    with the run's summary and log history beside it in the store."""
    from tasks.training.grpo_callbacks import BEST_FOLDER

    state, rules = run.trainer.state, run.keep_best.rules
    run.store.write_json(f"{run.folder}/log_history.json", state.log_history)
    exported = f"{run.folder}/{BEST_FOLDER if rules.best_step is not None else FINAL_FOLDER}"
    summary = {
        "final_step": state.global_step,
        "best_step": rules.best_step,
        "best_eval_reward": rules.state_dict()["best_reward"],
        "stop_reason": rules.outcome(),
        "adapter": exported,
    }
    run.store.write_json(f"{run.folder}/summary.json", summary)
    log.info("seed %d done: %s", run.seed, summary)
    adapter = Adapter(
        fingerprint=run.store.dir_digest(exported),
        seed=run.seed,
        run_key=run.key,
        folder=exported,
        log_history=f"{run.folder}/log_history.json",
        global_step=state.global_step,
        best_step=rules.best_step,
        best_eval_reward=summary["best_eval_reward"],
        stop_reason=summary["stop_reason"],
    )
    return adapter


def finished_run(store: ArtifactStore, key: str) -> TrainingRecord | None:
    """The record of the run `key`, when it finished."""
    record = f"{run_folder(key)}/{RECORD_FILE}"
    return TrainingRecord.model_validate(store.read_json(record)) if store.exists(record) else None


def training_records(store: ArtifactStore) -> list[TrainingRecord]:
    """Every finished run in the store, oldest first."""
    records = [finished_run(store, key) for key in store.listdir(RUNS)]
    return sorted(filter(None, records), key=lambda record: record.finished_at)


def seed_finished(
    training: TrainingConfig,
    lora: LoraConfig,
    data: PreparedData,
    base: BaseModelArtifact,
    seed: int,
    store: ArtifactStore,
) -> bool:
    """Whether the seed's run has finished in the store, so `train_seed` only hands it back."""
    key = run_key(training, lora, data, base, seed, machine_backend(training.backend))
    return finished_run(store, key) is not None


@returns_memory
def train_seed(
    training: TrainingConfig,
    lora: LoraConfig,
    data: PreparedData,
    base: BaseModelArtifact,
    seed: int,
    store: ArtifactStore,
) -> Adapter:
    """One seed's GRPO run, one process at a time per run and store: two started together (two
    `tucano train --seed 42`) trained into the same checkpoints, each overwriting the other's.
    The second waits for the first, then hands back the adapter it exported."""
    # The key build_trainer names the run's folder with.
    key = run_key(training, lora, data, base, seed, machine_backend(training.backend))
    with StoreLock(store, run_folder(key)) as lock:
        finished = finished_run(store, key)
        if finished is not None:
            log.info(
                "seed %d: run %s already finished; its adapter: %s",
                seed, key, store.uri(finished.adapter.folder),
            )  # fmt: skip
            return finished.adapter
        store = lock.guarded_store()
        with tempfile.TemporaryDirectory(prefix="tucano-train-") as tmp:
            run = build_trainer(training, lora, data, base, seed, store, Path(tmp))
            run_trainer(run)
        adapter = export_adapter(run)
        finished_at = datetime.now(UTC).isoformat(timespec="seconds")
        record = TrainingRecord(finished_at=finished_at, adapter=adapter, base=base, prepared=data)
        store.write_json(f"{run.folder}/{RECORD_FILE}", record.model_dump(mode="json"))
        return adapter


def stop_rules(training: TrainingConfig) -> StopRules:
    guard = training.entropy_guard
    return StopRules(
        patience=training.early_stopping_patience,
        min_improvement=training.min_improvement,
        entropy_fraction=guard.min_fraction if guard.enabled else None,
        entropy_evals=guard.evals,
        max_truncated=training.max_heldout_truncation,
        max_agreement_drop=training.max_star_agreement_drop,
        max_flagging_drop=training.max_stated_flagging_drop,
        max_ruled_out_rise=training.max_ruled_out_flagging_rise,
        max_task_drop=training.max_task_drop,
        max_untrained_drop=training.max_untrained_drop,
    )


train_seed_task = task(
    train_seed,
    name="train-seed",
    task_run_name="train-seed-{seed}",
    cache_policy=ContentKey(),
    persist_result=True,
    retries=1,
    retry_delay_seconds=10,
)
