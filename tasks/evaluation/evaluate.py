"""Step 4: generate for every eval prompt and score it with the very scorers training used.

Generation settings come from the recipe's `evaluation` section and are passed explicitly, never
read from the model's generation_config.json. One row per (prompt, model, seed) is saved.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

from prefect import task
from tqdm.auto import tqdm

from configs.recipe import EvalConfig
from rewards import score
from rewards.common import completion_text
from rewards.context import CONTEXT_KEYS
from tasks.core.caching import ContentKey, cache_token
from tasks.core.manifests import Adapter, BaseModelArtifact, EvalRows, PreparedData
from tasks.core.store import ArtifactStore
from tasks.evaluation.decoding import decode_side_by_side
from tasks.training.model import load_model_and_tokenizer
from tasks.training.rollout import RolloutModel, completions_until_eos

BASE_TAG = "base"


def _generation_config(config: EvalConfig, tokenizer: Any) -> Any:
    from transformers import GenerationConfig

    sampling = {"temperature": config.temperature, "top_p": config.top_p, "top_k": 0}
    return GenerationConfig(
        max_new_tokens=config.max_new_tokens,
        do_sample=config.do_sample,
        **(sampling if config.do_sample else {}),
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


def generate(
    model: Any, tokenizer: Any, prompts: list[list[dict[str, str]]], config: EvalConfig
) -> list[dict[str, Any]]:
    """Completions for chat prompts, batched, reproducible for a given `config.seed`."""
    return [row for batch in generate_batches(model, tokenizer, prompts, config) for row in batch]


def generate_batches(
    model: Any,
    tokenizer: Any,
    prompts: list[list[dict[str, str]]],
    config: EvalConfig,
    *,
    done: int = 0,
) -> Iterator[list[dict[str, Any]]]:
    """`generate`, one batch at a time, for callers that keep each batch as it comes; `done`
    prompts were handled earlier (the progress bar starts there)."""
    tokenizer.padding_side = "left"
    generation_config = _generation_config(config, tokenizer)
    model.eval()
    rollout = RolloutModel(model, config.rollout_engine)
    texts = [
        tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]
    progress = tqdm(
        total=done + len(prompts), initial=done, desc="generating", unit="prompt", disable=None
    )
    # Each batch is sampled from a seed of its own, whichever way it is decoded.
    batches = (
        (
            tokenizer(
                texts[start : start + config.batch_size],
                return_tensors="pt",
                padding=True,
                add_special_tokens=False,
            ).to(model.device),
            config.seed + done + start,
        )
        for start in range(0, len(prompts), config.batch_size)
    )
    if rollout.fast and not rollout.static_cache:
        answers = decode_side_by_side(
            rollout.model,
            ((encoded["input_ids"], encoded["attention_mask"], seed) for encoded, seed in batches),
            generation_config,
            config.decode_rows,
        )
    else:
        # One shape for every batch, so a compiled engine compiles once.
        width = max(
            (len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]),
            default=0,
        )
        answers = (
            _generated(rollout, encoded, seed, generation_config, width, config.batch_size)
            for encoded, seed in batches
        )
    for batch in answers:
        progress.update(len(batch))
        yield [
            {
                "completion": tokenizer.decode(row, skip_special_tokens=True),
                "tokens": len(row),
                "truncated": row[-1] != tokenizer.eos_token_id,
            }
            for row in batch
        ]
    progress.close()


def _generated(
    rollout: RolloutModel, encoded: Any, seed: int, generation_config: Any, width: int, rows: int
) -> list[list[int]]:
    """One batch's answers through the rollout engine's `generate`, seeded with `seed`."""
    import torch

    torch.manual_seed(seed)
    generated = rollout.generate(
        encoded["input_ids"], encoded["attention_mask"], generation_config, width=width, rows=rows
    )
    completions = generated[:, encoded["input_ids"].shape[1] :]
    return completions_until_eos(completions, [generation_config.eos_token_id])


def score_row(
    prompt_row: dict[str, Any], generation: dict[str, Any], database: str | None
) -> dict[str, Any]:
    """The reward of a generated answer (`completion`, and whether it was `truncated`), through
    the same code path as training's."""
    context = {key: prompt_row[key] for key in CONTEXT_KEYS}
    result = score(
        prompt_row["task"],
        completion_text(generation["completion"]),
        database=database,
        truncated=generation["truncated"],
        **context,
    )
    return {"total": result.total, "components": result.components}


def load_with_adapter(
    base: BaseModelArtifact, adapter: Adapter | None, store: ArtifactStore
) -> tuple[Any, Any]:
    """The base model as the recipe runs it, with the adapter on top when there is one."""
    model, tokenizer = load_model_and_tokenizer(base, store)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(store.local_dir(adapter.folder)))
    return model, tokenizer


def adds_nothing(adapter: Adapter, store: ArtifactStore) -> bool:
    """Whether the adapter leaves its base model as it is: every LoRA B matrix zero, as PEFT
    initialises them. A run in which no step beat its start exports that start (best step 0)."""
    from safetensors.torch import load_file

    weights = load_file(store.local_dir(adapter.folder) / "adapter_model.safetensors")
    return all(not tensor.any() for name, tensor in weights.items() if "lora_B" in name)


def evaluate_model(
    config: EvalConfig,
    data: PreparedData,
    base: BaseModelArtifact,
    adapter: Adapter | None,
    store: ArtifactStore,
    start_rows: EvalRows | None = None,
) -> EvalRows:
    """The adapter (or the base model alone) on the eval split. `start_rows`: the base model's
    rows under the same settings, whose answers an adapter that adds nothing gives again."""
    tag = BASE_TAG if adapter is None else f"seed-{adapter.seed}"
    prompts = store.read_jsonl(data.eval)
    database = str(data.local_database(store))
    if adapter is not None and start_rows is not None and adds_nothing(adapter, store):
        # Weight for weight the start model, so its answers are the start's: a second pass would
        # only spend the time (a full evaluation of the real model; tests/test_rollout.py).
        answered = {row["prompt_id"]: row for row in store.read_jsonl(start_rows.rows)}
        generations = [
            {key: answered[row["prompt_id"]][key] for key in ("completion", "tokens", "truncated")}
            for row in prompts
        ]
    else:
        model, tokenizer = load_with_adapter(base, adapter, store)
        generations = generate(model, tokenizer, [row["prompt"] for row in prompts], config)
    rows = [
        {
            "prompt_id": prompt["prompt_id"],
            "task": prompt["task"],
            "model": tag,
            "seed": None if adapter is None else adapter.seed,
            **generation,
            **score_row(prompt, generation, database),
        }
        for prompt, generation in zip(prompts, generations, strict=True)
    ]
    identity = cache_token([config, data, base, adapter])
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    path = f"eval/{tag}-{digest[:16]}.jsonl"
    store.write_jsonl(path, rows)
    return EvalRows(
        fingerprint=store.sha256(path),
        model_tag=tag,
        seed=None if adapter is None else adapter.seed,
        rows=path,
    )


evaluate_model_task = task(
    evaluate_model,
    name="evaluate-model",
    cache_policy=ContentKey(),
    persist_result=True,
)
