"""Step 3: GRPO with TRL's GRPOTrainer and a PEFT LoRA adapter, one seed per call.

Generation settings always come from the recipe and are passed to TRL explicitly: a model's own
generation_config.json (temperature 0.1 in the seed's first run) never decides how rollouts sample.
Checkpoints go into the artifact store as they are saved, each complete or invisible.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from pathlib import Path
from typing import Any

from prefect import task

from configs.recipe import LoraConfig, TrainingConfig
from rewards import RewardFunction, trl_component_functions, trl_reward_functions
from tasks.backends import UNSLOTH, load_policy, longest_sequence, machine_backend
from tasks.caching import ContentKey
from tasks.checkpoints import RunCheckpoints
from tasks.manifests import Adapter, BaseModelArtifact, PreparedData
from tasks.prep.build import data_database
from tasks.stopping import Preempted, StopRules
from tasks.store import ArtifactStore

log = logging.getLogger("tucano.train")


def run_key(
    training: TrainingConfig,
    lora: LoraConfig,
    data: PreparedData,
    base: BaseModelArtifact,
    seed: int,
    backend: str,
) -> str:
    """Names one training run: same recipe, data, base model, seed and backend -> same key.
    The backend is the resolved one: Unsloth's kernels and PEFT's differ numerically, so a run
    never resumes from the other's checkpoints."""
    identity = {
        "backend": backend,
        "training": training.model_dump(mode="json"),
        "lora": lora.model_dump(mode="json"),
        "data": data.fingerprint,
        "base": base.fingerprint,
        "seed": seed,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


# Recipe fields that are GRPOConfig fields of the same name and meaning.
GRPO_PASSTHROUGH = (
    "learning_rate", "lr_scheduler_type", "beta", "scale_rewards", "loss_type", "epsilon",
    "epsilon_high", "mask_truncated_completions", "multi_objective_aggregation",
    "num_generations", "max_completion_length", "temperature", "top_p", "max_steps",
    "save_steps", "logging_steps",
)  # fmt: skip


def grpo_config(training: TrainingConfig, seed: int, output_dir: Path) -> Any:
    import torch
    from trl import GRPOConfig

    on_gpu = torch.cuda.is_available()
    return GRPOConfig(
        output_dir=str(output_dir),
        seed=seed,
        data_seed=seed,
        **training.model_dump(include=set(GRPO_PASSTHROUGH)),
        warmup_steps=training.warmup_ratio,
        # Every completion of a step is one batch: prompts_per_step groups of num_generations.
        per_device_train_batch_size=training.prompts_per_step * training.num_generations,
        gradient_accumulation_steps=1,
        # Sampling is the recipe's alone: no top-k from the model's generation_config.json.
        top_k=0,
        save_strategy="steps",
        eval_strategy="steps" if training.heldout_prompts else "no",
        eval_steps=training.eval_steps,
        num_generations_eval=training.num_generations_eval,
        per_device_eval_batch_size=training.num_generations_eval * training.prompts_per_step,
        # Only the newest local copy is kept; the store keeps `keep_checkpoints` of them.
        save_total_limit=1,
        report_to=[],
        bf16=on_gpu and torch.cuda.is_bf16_supported(),
        use_cpu=not on_gpu,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def reward_functions(training: TrainingConfig, database: str) -> list[RewardFunction]:
    """GDPO (per-component normalisation) needs the components as separate functions; the seed's
    summed reward needs one total per task."""
    if training.multi_objective_aggregation == "normalize_then_sum":
        return trl_component_functions(database)
    return trl_reward_functions(database)


def split_heldout(rows: list[dict[str, Any]], heldout: int) -> tuple[list, list]:
    """The last `heldout` train prompts (the file is already shuffled) are held out for periodic
    eval; the final eval split is never seen during training."""
    if heldout >= len(rows):
        raise ValueError(
            f"training.heldout_prompts={heldout} leaves no train prompts of {len(rows)}"
        )
    return (rows[:-heldout], rows[-heldout:]) if heldout else (rows, [])


def train_seed(
    training: TrainingConfig,
    lora: LoraConfig,
    data: PreparedData,
    base: BaseModelArtifact,
    seed: int,
    store: ArtifactStore,
) -> Adapter:
    backend = machine_backend(training.backend)
    key = run_key(training, lora, data, base, seed, backend)
    folder = f"runs/{key}"
    all_rows = store.read_jsonl(data.train)
    train_rows, heldout_rows = split_heldout(all_rows, training.heldout_prompts)
    max_seq_length = (
        longest_sequence(
            base, store, [r["prompt"] for r in all_rows], training.max_completion_length
        )
        if backend == UNSLOTH
        else 0  # PEFT needs no length fixed in advance
    )
    # Loaded before anything imports trl: Unsloth patches it on import.
    policy = load_policy(backend, base, lora, seed, max_seq_length, store)

    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    from tasks import callbacks

    functions = reward_functions(training, str(data_database(data, store)))
    checkpoints = RunCheckpoints(store, f"{folder}/checkpoints", training.keep_checkpoints)
    sigterm = callbacks.CheckpointOnSigterm()
    with tempfile.TemporaryDirectory(prefix="tucano-train-") as tmp:
        output_dir = Path(tmp) / "checkpoints"
        resume = checkpoints.restore_latest(output_dir)
        # The stateful callbacks come first, so their state is in a checkpoint before upload.
        keep_best = callbacks.KeepBest(stop_rules(training), checkpoints, store, folder, resume)
        stateful: list[Any] = [keep_best]
        trainer_class, extra = GRPOTrainer, {}
        if training.dynamic_sampling.enabled:
            from tasks import dynamic_sampling

            stream = dynamic_sampling.PromptStream(train_rows, seed, resume)
            stateful.append(dynamic_sampling.SaveStreamPosition(stream))
            trainer_class = dynamic_sampling.DynamicSamplingGRPOTrainer
            extra = {"prompt_stream": stream, "max_refills": training.dynamic_sampling.max_refills}
        if training.task_weighting.enabled:
            stateful.append(callbacks.task_weighting(training.task_weighting, functions, resume))
        trainer = trainer_class(
            model=policy.model,
            reward_funcs=functions,
            args=grpo_config(training, seed, output_dir),
            train_dataset=Dataset.from_list(train_rows),
            eval_dataset=Dataset.from_list(heldout_rows) if heldout_rows else None,
            processing_class=policy.tokenizer,
            peft_config=policy.peft_config,
            callbacks=[
                *stateful,
                callbacks.UploadCheckpoints(checkpoints),
                callbacks.LogSteps(),
                sigterm,
            ],
            **extra,
        )
        for callback in stateful:
            if hasattr(callback, "attach"):
                callback.attach(trainer)
        # The default printer dumps every metric dict to stdout; LogSteps says what matters.
        trainer.remove_callback(PrinterCallback)
        log.info(
            "training seed %d (run %s, %s backend) for %d steps%s",
            seed,
            key,
            backend,
            training.max_steps,
            f", resuming at step {resume.name.split('-')[1]}" if resume else "",
        )
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        if sigterm.received:
            raise Preempted(
                f"seed {seed}: stopped by SIGTERM after step {trainer.state.global_step}; "
                f"its checkpoint is in {store.uri(checkpoints.folder)}"
            )
        trainer.save_model(str(Path(tmp) / "final"))
        store.put_dir(Path(tmp) / "final", f"{folder}/final")
    store.write_json(f"{folder}/log_history.json", trainer.state.log_history)
    rules = keep_best.rules
    # The run's adapter is the best by held-out reward; the final one when nothing was evaluated.
    exported = (
        f"{folder}/{callbacks.BEST_FOLDER}" if rules.best_step is not None else f"{folder}/final"
    )
    summary = {
        "final_step": trainer.state.global_step,
        "best_step": rules.best_step,
        "best_eval_reward": rules.state_dict()["best_reward"],
        "stop_reason": rules.stop_reason or "max_steps reached",
        "adapter": exported,
    }
    store.write_json(f"{folder}/summary.json", summary)
    log.info("seed %d done: %s", seed, summary)
    return Adapter(
        fingerprint=store.dir_digest(exported),
        seed=seed,
        run_key=key,
        folder=exported,
        log_history=f"{folder}/log_history.json",
        global_step=trainer.state.global_step,
        best_step=rules.best_step,
        best_eval_reward=summary["best_eval_reward"],
        stop_reason=summary["stop_reason"],
    )


def stop_rules(training: TrainingConfig) -> StopRules:
    guard = training.entropy_guard
    return StopRules(
        patience=training.early_stopping_patience,
        min_improvement=training.min_improvement,
        entropy_fraction=guard.min_fraction if guard.enabled else None,
        entropy_evals=guard.evals,
    )


def _retry_unless_preempted(task: Any, task_run: Any, state: Any) -> bool:
    """A retry resumes from the newest checkpoint, which helps after a crash; after SIGTERM the
    machine is going away, so resuming is the next run's job (issue: automatic resume)."""
    try:
        state.result()
    except Preempted:
        return False
    except Exception:
        return True
    return True


train_seed_task = task(
    train_seed,
    name="train-seed",
    task_run_name="train-seed-{seed}",
    cache_policy=ContentKey(modules=("tasks.train", "tasks.backends", "tasks.model", "rewards")),
    persist_result=True,
    retries=1,
    retry_delay_seconds=10,
    retry_condition_fn=_retry_unless_preempted,
)
