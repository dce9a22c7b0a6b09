"""Step 3: GRPO with TRL's GRPOTrainer and a PEFT LoRA adapter, one seed per call.

Generation settings always come from the recipe and are passed to TRL explicitly: a model's own
generation_config.json (temperature 0.1 in the seed's first run) never decides how rollouts sample.
Checkpoints go into the artifact store as they are saved, each complete or invisible.
"""

from __future__ import annotations

import hashlib
import json
import logging
import signal
import tempfile
from pathlib import Path
from typing import Any

from prefect import task

from configs.recipe import LoraConfig, TaskWeightingConfig, TrainingConfig
from rewards import SCORERS, RewardFunction, trl_component_functions, trl_reward_functions
from rewards.task_weighting import TaskWeighting
from tasks.caching import ContentKey
from tasks.checkpoints import RunCheckpoints
from tasks.manifests import Adapter, BaseModelArtifact, PreparedData
from tasks.model import load_model_and_tokenizer
from tasks.prep.build import data_database
from tasks.store import ArtifactStore

log = logging.getLogger("tucano.train")


def run_key(
    training: TrainingConfig,
    lora: LoraConfig,
    data: PreparedData,
    base: BaseModelArtifact,
    seed: int,
) -> str:
    """Names one training run: same recipe, data, base model and seed -> same key."""
    identity = {
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


TASK_WEIGHTING_FILE = "task_weighting.json"


def _task_weighting(
    config: TaskWeightingConfig, functions: list[RewardFunction], resume: Path | None
) -> Any:
    import torch
    from transformers import TrainerCallback

    class ApplyTaskWeights(TrainerCallback):
        """Each logging step: feed the tasks' mean rewards to IWU and reweight TRL's reward
        functions; each checkpoint: save IWU's state beside the model's."""

        def __init__(self) -> None:
            saved = resume / TASK_WEIGHTING_FILE if resume else None
            self.weighting = (
                TaskWeighting.from_state_dict(json.loads(saved.read_text()))
                if saved is not None and saved.exists()
                else TaskWeighting(tuple(SCORERS), config.eta, config.window, config.min_weight)
            )
            self.trainer: Any = None

        def attach(self, trainer: Any) -> None:
            self.trainer = trainer
            self._apply()

        def _apply(self) -> None:
            multipliers = self.weighting.multipliers()
            self.trainer.reward_weights = torch.tensor(
                [multipliers[fn.task] for fn in functions], dtype=torch.float32
            )

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
            means: dict[str, float] = {}
            for fn in functions:
                value = (logs or {}).get(f"rewards/{fn.__name__}/mean")
                if value is not None:
                    means[fn.task] = means.get(fn.task, 0.0) + value
            self.weighting.update(means)
            self._apply()
            log.info("task weights %s", {t: round(w, 3) for t, w in self.weighting.weights.items()})

        def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            (folder / TASK_WEIGHTING_FILE).write_text(json.dumps(self.weighting.state_dict()))

    return ApplyTaskWeights()


def _checkpoint_uploader(checkpoints: RunCheckpoints) -> Any:
    from transformers import TrainerCallback

    class UploadCheckpoints(TrainerCallback):
        """Copies each saved checkpoint into the store (marker last) as soon as it exists."""

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            local = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if local.is_dir():
                checkpoints.upload(local, state.global_step)

    return UploadCheckpoints()


class Preempted(RuntimeError):
    """SIGTERM arrived (a spot VM's notice): a final checkpoint was saved; run again to resume."""


def _sigterm_checkpoint() -> Any:
    from transformers import TrainerCallback

    class CheckpointOnSigterm(TrainerCallback):
        """On SIGTERM, finish the current step, save a checkpoint and stop."""

        def __init__(self) -> None:
            self.received = False
            self.previous: Any = None

        def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            try:
                self.previous = signal.signal(signal.SIGTERM, self._handle)
            except ValueError:  # not the main thread: the process's own handler stays
                log.warning("SIGTERM checkpointing unavailable outside the main thread")

        def _handle(self, signum: int, frame: Any) -> None:
            log.warning("SIGTERM: saving a checkpoint after this step, then stopping")
            self.received = True

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            if self.received:
                control.should_save = True
                control.should_training_stop = True

        def on_train_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            if self.previous is not None:
                signal.signal(signal.SIGTERM, self.previous)

    return CheckpointOnSigterm()


def _step_logger() -> Any:
    from transformers import TrainerCallback

    class LogSteps(TrainerCallback):
        """One line per logging step with what tells a healthy GRPO run from a dead one."""

        def on_log(
            self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any
        ) -> None:
            if logs and "reward" in logs:
                log.info(
                    "step %d/%d reward %.3f (std %.3f) frac_reward_zero_std %.2f entropy %.3f "
                    "clip_high %.3f lr %.2e",
                    state.global_step,
                    state.max_steps,
                    logs["reward"],
                    logs.get("reward_std", float("nan")),
                    logs.get("frac_reward_zero_std", float("nan")),
                    logs.get("entropy", float("nan")),
                    logs.get("clip_ratio/high_mean", float("nan")),
                    logs.get("learning_rate", float("nan")),
                )

    return LogSteps()


def train_seed(
    training: TrainingConfig,
    lora: LoraConfig,
    data: PreparedData,
    base: BaseModelArtifact,
    seed: int,
    store: ArtifactStore,
) -> Adapter:
    from datasets import Dataset
    from peft import LoraConfig as PeftLoraConfig
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    key = run_key(training, lora, data, base, seed)
    database = data_database(data, store)
    folder = f"runs/{key}"
    model, tokenizer = load_model_and_tokenizer(base, store)
    dataset = Dataset.from_list(store.read_jsonl(data.train))
    peft_config = PeftLoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )
    functions = reward_functions(training, str(database))
    checkpoints = RunCheckpoints(store, f"{folder}/checkpoints", training.keep_checkpoints)
    sigterm = _sigterm_checkpoint()
    with tempfile.TemporaryDirectory(prefix="tucano-train-") as tmp:
        output_dir = Path(tmp) / "checkpoints"
        resume = checkpoints.restore_latest(output_dir)
        callbacks = [_checkpoint_uploader(checkpoints), _step_logger(), sigterm]
        weighting = None
        if training.task_weighting.enabled:
            weighting = _task_weighting(training.task_weighting, functions, resume)
            # First, so that its state is in a checkpoint before the uploader copies it.
            callbacks.insert(0, weighting)
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=functions,
            args=grpo_config(training, seed, output_dir),
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=callbacks,
        )
        if weighting is not None:
            weighting.attach(trainer)
        # The default printer dumps every metric dict to stdout; _step_logger says what matters.
        trainer.remove_callback(PrinterCallback)
        log.info(
            "training seed %d (run %s) for %d steps%s",
            seed,
            key,
            training.max_steps,
            f", resuming at step {resume.name.split('-')[1]}" if resume else "",
        )
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        if sigterm.received:
            raise Preempted(
                f"seed {seed}: stopped by SIGTERM after step {trainer.state.global_step}; "
                f"its checkpoint is in {store.uri(checkpoints.folder)}"
            )
        adapter_dir = Path(tmp) / "adapter"
        trainer.save_model(str(adapter_dir))
        store.put_dir(adapter_dir, f"{folder}/adapter")
        fingerprint = store.dir_digest(f"{folder}/adapter")
    store.write_json(f"{folder}/log_history.json", trainer.state.log_history)
    return Adapter(
        fingerprint=fingerprint,
        seed=seed,
        run_key=key,
        folder=f"{folder}/adapter",
        log_history=f"{folder}/log_history.json",
        global_step=trainer.state.global_step,
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
    cache_policy=ContentKey(modules=("tasks.train", "tasks.model", "rewards")),
    persist_result=True,
    retries=1,
    retry_delay_seconds=10,
    retry_condition_fn=_retry_unless_preempted,
)
