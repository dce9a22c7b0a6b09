"""The model a run starts from: a tiny Qwen2 built from config, or a pretrained one.

The tiny model is built once per (config, train prompts) and kept in the artifact store: a BPE
tokenizer trained on the train prompts' Portuguese text, and a Qwen2ForCausalLM with random
weights from a fixed seed. Nothing is downloaded. A pretrained model is named by hub id or local
directory and loaded as it is.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

from prefect import task

from configs.recipe import ModelConfig, TinyModelConfig
from tasks.caching import ContentKey
from tasks.manifests import BaseModelArtifact, PreparedData
from tasks.store import ArtifactStore

# Qwen2.5's chat tokens, so prompts are laid out the same way for the tiny and the real model.
PAD_TOKEN, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def train_tokenizer(texts: list[str], vocab_size: int) -> Any:
    """A byte-level BPE tokenizer (every string encodes, like Qwen's) trained on `texts`."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD_TOKEN, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(texts, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START],
    )
    tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


def build_tiny_model(config: TinyModelConfig, texts: list[str], out_dir: Path) -> None:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = train_tokenizer(texts, config.tokenizer_vocab_size)
    model_config = Qwen2Config(
        vocab_size=len(tokenizer),
        **config.model_dump(exclude={"tokenizer_vocab_size", "init_seed"}),
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(config.init_seed)
    model = Qwen2ForCausalLM(model_config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def corpus(prepared: PreparedData, store: ArtifactStore) -> list[str]:
    """The text the tiny tokenizer learns from: every train prompt's messages."""
    rows = store.read_jsonl(prepared.train)
    return [message["content"] for row in rows for message in row["prompt"]]


def prepare_base_model(
    config: ModelConfig, prepared: PreparedData, store: ArtifactStore
) -> BaseModelArtifact:
    if config.load_in_4bit:
        # Loud, not silent: a 4-bit recipe must never quietly train a full-precision model.
        raise NotImplementedError(
            "model.load_in_4bit: NF4 4-bit loading (the Unsloth GPU backend) is not built yet; "
            "set model.load_in_4bit: false to train the model in full precision"
        )
    if config.source == "pretrained":
        location = str(config.name_or_path)
        return BaseModelArtifact(
            fingerprint=_pretrained_fingerprint(location),
            source="pretrained",
            location=location,
            in_store=False,
        )
    with tempfile.TemporaryDirectory(prefix="tucano-model-") as tmp:
        build_tiny_model(config.tiny, corpus(prepared, store), Path(tmp))
        digest = hashlib.sha256()
        for file in sorted(Path(tmp).rglob("*")):
            if file.is_file():
                digest.update(file.name.encode() + hashlib.sha256(file.read_bytes()).digest())
        fingerprint = digest.hexdigest()
        folder = f"models/tiny-{fingerprint[:16]}"
        store.put_dir(tmp, folder)
    return BaseModelArtifact(fingerprint=fingerprint, source="tiny", location=folder, in_store=True)


def _pretrained_fingerprint(location: str) -> str:
    """A local model folder by its files' content; a hub id by its name (resolved by the hub)."""
    path = Path(location)
    digest = hashlib.sha256(location.encode() if not path.is_dir() else b"")
    if path.is_dir():
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(file.name.encode() + hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def model_path(artifact: BaseModelArtifact, store: ArtifactStore) -> str:
    return str(store.local_dir(artifact.location)) if artifact.in_store else artifact.location


def load_model_and_tokenizer(artifact: BaseModelArtifact, store: ArtifactStore) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = model_path(artifact, store)
    tokenizer = AutoTokenizer.from_pretrained(path)
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model, tokenizer


prepare_base_model_task = task(
    prepare_base_model,
    name="prepare-base-model",
    cache_policy=ContentKey(modules=("tasks.model",)),
    persist_result=True,
)
