"""Who loads the policy for GRPO: Unsloth (its kernels, NF4 4-bit, LoRA) on a CUDA GPU where the
`gpu` extra is installed, transformers + PEFT LoRA everywhere else. Only loading differs; the
trainer, rewards, callbacks and checkpoints are one code path for both."""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from typing import Any

from configs.recipe import LoraConfig
from tasks.core.manifests import BaseModelArtifact
from tasks.core.store import ArtifactStore
from tasks.models.model import load_model_and_tokenizer, load_tokenizer, model_path

UNSLOTH, PEFT = "unsloth", "peft"
log = logging.getLogger("tucano.train")


class BackendError(RuntimeError):
    """The recipe asks for a backend this machine cannot run."""


def resolve_backend(requested: str, cuda_available: bool, unsloth_installed: bool) -> str:
    if requested == "auto":
        return UNSLOTH if cuda_available and unsloth_installed else PEFT
    if requested == UNSLOTH and not (cuda_available and unsloth_installed):
        missing = "a CUDA GPU" if not cuda_available else "the unsloth package (pip install .[gpu])"
        raise BackendError(
            f"training.backend: unsloth needs {missing}; use backend: auto or peft on this machine"
        )
    return requested


def bf16_training(cpu_bf16: bool) -> bool:
    """Whether training here runs under bfloat16 autocast: on a GPU where it has bfloat16; on a
    CPU when the recipe asks (`cpu_bf16`) and the CPU has the instructions, without which
    autocast emulates bfloat16 and a step is slower than in float32."""
    import torch

    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    if cpu_bf16 and not torch.cpu._is_avx512_bf16_supported():
        log.warning("cpu_bf16: this CPU has no avx512_bf16 instructions; training in float32")
        return False
    return cpu_bf16


def machine_backend(requested: str) -> str:
    """The backend `requested` resolves to here."""
    import torch

    return resolve_backend(
        requested, torch.cuda.is_available(), importlib.util.find_spec("unsloth") is not None
    )


@dataclass(frozen=True)
class Policy:
    model: Any
    tokenizer: Any
    # What GRPOTrainer wraps the model with; None when the model already carries its adapter.
    peft_config: Any | None


def peft_lora_config(lora: LoraConfig) -> Any:
    from peft import LoraConfig as PeftLoraConfig

    return PeftLoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )


def longest_prompt(base: BaseModelArtifact, store: ArtifactStore, prompts: list[Any]) -> int:
    """Tokens of the longest chat prompt: with the completion budget, what Unsloth must fit, and
    the width the fast rollout engine pads every prompt batch to."""
    tokenizer = load_tokenizer(base, store)
    texts = [
        tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]
    return max(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])


def load_policy(
    backend: str,
    base: BaseModelArtifact,
    lora: LoraConfig,
    seed: int,
    max_seq_length: int,
    store: ArtifactStore,
) -> Policy:
    if backend == PEFT:
        model, tokenizer = load_model_and_tokenizer(base, store)
        return Policy(model, tokenizer, peft_lora_config(lora))
    # Unsloth patches transformers and TRL when imported, so this import comes before trl's.
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=model_path(base, store),
        max_seq_length=max_seq_length,
        load_in_4bit=base.load_in_4bit,
        dtype=None,  # bf16 where the GPU has it
    )
    model = FastLanguageModel.get_peft_model(
        model,
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        use_gradient_checkpointing="unsloth",
        random_state=seed,
    )
    return Policy(model, tokenizer, None)
