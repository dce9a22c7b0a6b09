"""Step 4: generate for every eval prompt and score it with the very scorers training used.

Generation settings come from the recipe's `evaluation` section and are passed explicitly, never
read from the model's generation_config.json. One row per (prompt, model, seed) is saved.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from prefect import task

from configs.recipe import EvalConfig
from tasks.core.caching import ContentKey, cache_token, task_code_digest
from tasks.core.manifests import SFT_SOURCE, Adapter, BaseModelArtifact, EvalRows, PreparedData
from tasks.core.memory import returns_memory
from tasks.core.store import ArtifactStore
from tasks.generation.answering import generate, score_row
from tasks.models.model import load_model_and_tokenizer

# What a model's eval file and rows are named by (with `seed-N` for a seed's tuned model): the
# model itself, so that the SFT model's rows never read as the base model's.
BASE_TAG, SFT_TAG = "base", "sft"


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


def model_tag(model: BaseModelArtifact, adapter: Adapter | None) -> str:
    if adapter is not None:
        return f"seed-{adapter.seed}"
    return SFT_TAG if model.source == SFT_SOURCE else BASE_TAG


def answers_path(
    config: EvalConfig, data: PreparedData, base: BaseModelArtifact, adapter: Adapter | None
) -> str:
    """The store file of a model's eval answers, named by what makes them: the settings, the
    split, the models and this code."""
    tag = model_tag(base, adapter)
    identity = cache_token([config, data, base, adapter, task_code_digest(__name__)])
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return f"eval/{tag}-{digest[:16]}.jsonl"


@returns_memory
def evaluate_model(
    config: EvalConfig,
    data: PreparedData,
    base: BaseModelArtifact,
    adapter: Adapter | None,
    store: ArtifactStore,
    start_rows: EvalRows | None = None,
) -> EvalRows:
    """The adapter (or the start model alone) on the eval split. `start_rows`: the start model's
    rows under the same settings, whose answers an adapter that adds nothing gives again."""
    tag = model_tag(base, adapter)
    path = answers_path(config, data, base, adapter)
    # A file of that name holds these answers: one another process wrote
    # (flows/side_by_side.py) is taken as it is. A file in the store is whole or absent
    # (written by rename).
    if not store.exists(path):
        store.write_jsonl(path, _answer(config, data, base, adapter, store, start_rows, tag))
    return EvalRows(
        fingerprint=store.sha256(path),
        model_tag=tag,
        seed=None if adapter is None else adapter.seed,
        rows=path,
    )


def _answer(
    config: EvalConfig,
    data: PreparedData,
    base: BaseModelArtifact,
    adapter: Adapter | None,
    store: ArtifactStore,
    start_rows: EvalRows | None,
    tag: str,
) -> list[dict[str, Any]]:
    """Each eval prompt's row: the answer and its scores."""
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
        generations = generate(
            model, tokenizer, [row["prompt"] for row in prompts], config,
            stage=f"evaluation of {tag}",
        )  # fmt: skip
    return [
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


evaluate_model_task = task(
    evaluate_model,
    name="evaluate-model",
    cache_policy=ContentKey(),
    persist_result=True,
)
