"""Step 3a: supervised fine-tuning on the train split's reference answers, before GRPO.

TRL's SFTTrainer learns the answer of each train prompt (loss on the answer only) with a LoRA
adapter, or every weight for a tiny model; the result is merged into plain weights, so GRPO trains
a fresh LoRA on top and the SFT model is the start model the report compares each seed with: the
report then isolates GRPO's own effect, and shows the base model -> SFT model step apart.
Checkpoints go into the store like GRPO's (same markers, same resume), and the run is keyed by
its recipe, data, base model and code.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import tempfile
from pathlib import Path
from typing import Any

from prefect import task

from configs.recipe import LoraConfig, SftConfig, deal
from tasks.core import signals
from tasks.core.caching import ContentKey, identity_key, task_code_digest
from tasks.core.locks import StoreLock
from tasks.core.manifests import SFT_SOURCE, BaseModelArtifact, PreparedData
from tasks.core.memory import returns_memory
from tasks.core.store import ArtifactStore
from tasks.models.backends import bf16_training, peft_lora_config
from tasks.models.model import load_model_and_tokenizer
from tasks.training.checkpoints import RunCheckpoints, checkpoint_step, train_from

# The issues in the order a reference's problem is named by: the rarest in the split first.
RAREST_FIRST = ("product_issue", "seller_issue", "delivery_issue")

log = logging.getLogger("tucano.sft")

MODEL_FOLDER = "model"


class SftError(ValueError):
    """An SFT recipe this product cannot run; the message names the field."""


def sft_key(
    config: SftConfig, lora: LoraConfig, data: PreparedData, base: BaseModelArtifact
) -> str:
    identity = {
        "sft": config.model_dump(mode="json"),
        "lora": None if config.full_finetune else lora.model_dump(mode="json"),
        "data": data.fingerprint,
        "base": base.fingerprint,
        "code": task_code_digest(__name__),
    }
    return identity_key(identity)


def sft_examples(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """TRL's conversational prompt/completion form: the loss falls on the answer alone."""
    return [
        {
            "prompt": row["prompt"],
            "completion": [{"role": "assistant", "content": row["reference"]}],
        }
        for row in rows
    ]


def reference_problem(row: dict[str, Any]) -> str:
    """The problem an extraction reference flags, the rarer first (a review that blames the
    product and the delivery counts as a product one): product, seller, delivery or none."""
    flags = json.loads(row["reference"])
    return next((issue for issue in RAREST_FIRST if flags.get(issue)), "none")


def _dealt(pool: list[dict[str, Any]], wanted: int, rng: random.Random) -> list[dict[str, Any]]:
    rng.shuffle(pool)
    return [pool[i % len(pool)] for i in range(wanted)]


def _dealt_by_problem(
    pool: list[dict[str, Any]], wanted: int, rng: random.Random
) -> list[dict[str, Any]]:
    """`wanted` extraction rows, each problem's in turn (`reference_problem`), every problem's
    rows in a seeded order and taken again from the start when it has fewer than its share."""
    by_problem: dict[str, list[dict[str, Any]]] = {}
    for row in pool:
        by_problem.setdefault(reference_problem(row), []).append(row)
    problems = sorted(by_problem)
    each, left = divmod(wanted, len(problems))
    return [
        row
        for rank, problem in enumerate(problems)
        for row in _dealt(by_problem[problem], each + (rank < left), rng)
    ]


def mixed_rows(
    rows: list[dict[str, Any]],
    mix: dict[str, float],
    count: int,
    seed: int,
    balance_issues: bool = False,
) -> list[dict[str, Any]]:
    """`count` rows dealt over the tasks by `mix`: each task's rows in a seeded order, taken
    again from the start when the task has fewer than its share; with `balance_issues`, the
    extraction rows dealt equally over the problems their references flag."""
    rng = random.Random(seed)
    by_task: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_task.setdefault(row["task"], []).append(row)
    chosen: list[dict[str, Any]] = []
    for task_name, wanted in deal(count, mix).items():
        pool = by_task.get(task_name, [])
        if wanted and not pool:
            raise SftError(
                f"sft.task_mix gives {task_name} {wanted} examples; the train split has none"
            )
        if balance_issues and task_name == "extraction":
            chosen += _dealt_by_problem(pool, wanted, rng)
        else:
            chosen += _dealt(pool, wanted, rng)
    rng.shuffle(chosen)
    return chosen


def answers_too_long(
    rows: list[dict[str, Any]], tokenizer: Any, limit: int
) -> dict[str, tuple[int, int, int]]:
    """Per task, the references that do not fit `limit` generated tokens with their end of turn:
    (how many, of how many, the longest in tokens). SFT teaching such an answer teaches one that
    generation always cuts before it ends, and its end of turn is never learned where it counts."""
    answers = [row["reference"] + tokenizer.eos_token for row in rows]
    encoded = tokenizer(answers, add_special_tokens=False)["input_ids"]
    lengths: dict[str, list[int]] = {}
    for row, ids in zip(rows, encoded, strict=True):
        lengths.setdefault(row["task"], []).append(len(ids))
    return {
        task: (sum(n > limit for n in counts), len(counts), max(counts))
        for task, counts in lengths.items()
        if max(counts) > limit
    }


def conversations(examples: list[dict[str, Any]]) -> list[list[dict[str, str]]]:
    """Each example whole, its prompt's messages and then its answer, as SFTTrainer formats it."""
    return [example["prompt"] + example["completion"] for example in examples]


def example_lengths(examples: list[dict[str, Any]], tokenizer: Any) -> list[int]:
    """Each example's tokens, chat-formatted as SFTTrainer feeds it."""
    encoded = tokenizer.apply_chat_template(
        conversations(examples), tokenize=True, return_dict=True
    )
    return [len(ids) for ids in encoded["input_ids"]]


def examples_too_long(lengths: list[int], max_length: int) -> tuple[int, int]:
    """(how many, the longest in tokens) of the examples longer than `max_length`. TRL cuts those
    at the end, where the answer's end of turn is: the model would learn from them answers that
    never end, the one failure SFT is here to prevent."""
    return sum(n > max_length for n in lengths), max(lengths)


def batched_by_length(
    examples: list[dict[str, Any]], lengths: list[int], batch_size: int, seed: int
) -> list[dict[str, Any]]:
    """The examples in batches of `batch_size` of about one length, the batches in a seeded order
    (to be read in this order). A batch is padded to its longest example, and every token of it
    costs the same: dealt at random, cpu_smol's batches were 31% padding (an insights example of
    550 tokens beside extractions of 350), by length 0.5%. Transformers' own `group_by_length`
    orders each stretch of batches longest first, so SFT would end on the push and SQL examples
    alone; here the batches of every length come in a seeded order."""
    by_length = sorted(range(len(examples)), key=lengths.__getitem__)
    batches = [by_length[at : at + batch_size] for at in range(0, len(by_length), batch_size)]
    # A short batch stays last: the trainer cuts the list every `batch_size` examples, and one
    # anywhere else would shift every batch after it.
    whole = batches if len(batches[-1]) == batch_size else batches[:-1]
    random.Random(seed).shuffle(whole)
    ordered = whole + batches[len(whole) :]
    return [examples[index] for batch in ordered for index in batch]


def sft_args(config: SftConfig, output_dir: Path) -> Any:
    import torch
    from trl import SFTConfig

    on_gpu = torch.cuda.is_available()
    return SFTConfig(
        output_dir=str(output_dir),
        seed=config.seed,
        data_seed=config.seed,
        learning_rate=config.learning_rate,
        lr_scheduler_type=config.lr_scheduler_type,
        warmup_steps=0.05,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_size,
        gradient_accumulation_steps=1,
        max_length=config.max_length,
        completion_only_loss=True,
        save_strategy="steps",
        save_steps=config.save_steps,
        # Only the newest local copy is kept; the store keeps `keep_checkpoints` of them.
        save_total_limit=1,
        logging_steps=max(1, config.max_steps // 20),
        report_to=[],
        bf16=bf16_training(config.cpu_bf16),
        gradient_checkpointing=config.gradient_checkpointing,
        use_cpu=not on_gpu,
        # The examples come batched by length, in the order to train on (`batched_by_length`).
        train_sampling_strategy="sequential" if config.batches_by_length else "random",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )


def _train_sft_unlocked(
    config: SftConfig,
    lora: LoraConfig,
    data: PreparedData,
    base: BaseModelArtifact,
    store: ArtifactStore,
    answer_limit: int | None = None,
) -> BaseModelArtifact:
    """The SFT model, merged into plain weights in the store, resumed from its newest checkpoint
    when a run was cut short. `answer_limit` is the fewest tokens the recipe lets a model
    generate (rollouts, evaluation): references longer than that are reported."""
    if base.load_in_4bit:
        raise SftError(
            "sft.enabled with model.load_in_4bit: merging an adapter into NF4 weights loses "
            "precision; run SFT on the full-precision model (model.load_in_4bit: false)"
        )
    key = sft_key(config, lora, data, base)
    folder = f"sft/{key}"
    location = f"{folder}/{MODEL_FOLDER}"
    # A full fine-tune's checkpoint holds the weights and Adam's two moments (1.5 GB each for
    # SmolLM2-135M, two kept): once the model is complete they resume nothing, so they go.
    checkpoints = RunCheckpoints(store, f"{folder}/checkpoints", config.keep_checkpoints)
    if store.is_complete(location):
        # A finished run started again (a retry, a lost cache) hands back its model as stored,
        # and the checkpoints of one stopped between the two writes go now.
        log.info("SFT run %s already finished: %s", key, store.uri(location))
        checkpoints.remove_all()
        return _artifact(store, location)
    model, tokenizer = load_model_and_tokenizer(base, store)
    examples = training_examples(config, store.read_jsonl(data.train), tokenizer, answer_limit)
    with tempfile.TemporaryDirectory(prefix="tucano-sft-") as tmp:
        workdir = Path(tmp)
        resume = checkpoints.restore_latest(workdir / "checkpoints")
        trainer = build_trainer(config, lora, model, tokenizer, examples, checkpoints, workdir)
        log.info(
            "SFT (run %s) for %d steps%s", key, config.max_steps,
            f", resuming at step {checkpoint_step(resume)}" if resume else "",
        )  # fmt: skip
        run_trainer(trainer, checkpoints, resume)
        export_model(trainer, config, tokenizer, store, folder, workdir)
    checkpoints.remove_all()
    return _artifact(store, location)


def training_examples(
    config: SftConfig, rows: list[dict[str, Any]], tokenizer: Any, answer_limit: int | None
) -> list[dict[str, Any]]:
    """The examples SFT trains on, in the order it takes them: the train split mixed by
    `sft.task_mix`, each one checked to fit `sft.max_length` (an error names the longest), and
    the reference answers longer than `answer_limit` reported."""
    if answer_limit is not None:
        for task_name, (over, total, longest) in answers_too_long(
            rows, tokenizer, answer_limit
        ).items():
            log.warning(
                "%d of %d %s reference answers (the longest %d tokens with the end of turn) do not "
                "fit the %d tokens generation allows (training.max_completion_length, "
                "evaluation.max_new_tokens): the model learns answers that are always cut short",
                over, total, task_name, longest, answer_limit,
            )  # fmt: skip
    if config.task_mix is not None:
        rows = mixed_rows(
            rows,
            config.task_mix,
            config.max_steps * config.batch_size,
            config.seed,
            config.balance_issues,
        )
    examples = sft_examples(rows)
    lengths = example_lengths(examples, tokenizer)
    over, longest = examples_too_long(lengths, config.max_length)
    if over:
        raise SftError(
            f"{over} of {len(examples)} SFT examples (prompt and reference answer, chat-formatted) "
            f"are longer than sft.max_length={config.max_length} tokens, the longest {longest}: "
            "cut there, they lose their end of turn and teach answers that never end; set "
            f"sft.max_length to at least {longest}"
        )
    if config.batches_by_length:
        examples = batched_by_length(examples, lengths, config.batch_size, config.seed)
    return examples


def build_trainer(
    config: SftConfig,
    lora: LoraConfig,
    model: Any,
    tokenizer: Any,
    examples: list[dict[str, Any]],
    checkpoints: RunCheckpoints,
    workdir: Path,
) -> Any:
    """TRL's SFT trainer on `examples`, its checkpoints written under `workdir` and uploaded to
    `checkpoints`, a LoRA adapter's unless the recipe fine-tunes every weight."""
    from datasets import Dataset
    from transformers import set_seed
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTTrainer

    from tasks.training import checkpoint_callbacks, step_log

    # SFTTrainer draws the LoRA initialisation before it seeds anything, as GRPOTrainer does
    # (train.py): a run whose process had drawn something else before trained other weights.
    set_seed(config.seed)
    trainer = SFTTrainer(
        model=model,
        args=sft_args(config, workdir / "checkpoints"),
        train_dataset=Dataset.from_list(examples),
        processing_class=tokenizer,
        peft_config=None if config.full_finetune else peft_lora_config(lora),
        callbacks=[
            checkpoint_callbacks.UploadCheckpoints(checkpoints),
            step_log.LogLoss(),
            step_log.ReportProgress("SFT"),
            checkpoint_callbacks.StopOnSignal(),
        ],
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def run_trainer(trainer: Any, checkpoints: RunCheckpoints, resume: Path | None) -> None:
    """Train to the end, from the restored checkpoint if any; a SIGTERM or SIGINT ends the run
    after the step in progress, its checkpoint saved, or abandons that step at the signals'
    deadline, as GRPO's run does."""
    kept = functools.partial(checkpoints.kept, "SFT")
    with signals.keeping(kept), signals.deferred():
        train_from(trainer, resume)
    signals.stop_if_requested(kept())


def export_model(
    trainer: Any,
    config: SftConfig,
    tokenizer: Any,
    store: ArtifactStore,
    folder: str,
    workdir: Path,
) -> None:
    """The trained model as plain weights (a LoRA adapter merged in) with its tokenizer, in the
    run's folder of the store, after its log history."""
    merged = trainer.model if config.full_finetune else trainer.model.merge_and_unload()
    merged.save_pretrained(workdir / MODEL_FOLDER)
    tokenizer.save_pretrained(workdir / MODEL_FOLDER)
    # The history first: a complete model folder is what says the run finished.
    store.write_json(f"{folder}/log_history.json", trainer.state.log_history)
    store.put_dir(workdir / MODEL_FOLDER, f"{folder}/{MODEL_FOLDER}")


@returns_memory
def train_sft(
    config: SftConfig,
    lora: LoraConfig,
    data: PreparedData,
    base: BaseModelArtifact,
    store: ArtifactStore,
    answer_limit: int | None = None,
) -> BaseModelArtifact:
    """The SFT run, one process at a time per key and store, as GRPO's (`train.train_seed`): a
    second one started beside it waits, then finds the model it made and hands that back."""
    with StoreLock(store, f"sft/{sft_key(config, lora, data, base)}") as lock:
        return _train_sft_unlocked(config, lora, data, base, lock.guarded_store(), answer_limit)


def _artifact(store: ArtifactStore, location: str) -> BaseModelArtifact:
    return BaseModelArtifact(
        fingerprint=store.dir_digest(location), source=SFT_SOURCE, location=location, in_store=True
    )


train_sft_task = task(
    train_sft,
    name="sft",
    cache_policy=ContentKey(),
    persist_result=True,
    retries=1,
    retry_delay_seconds=10,
)
