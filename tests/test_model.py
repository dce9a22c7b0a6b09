"""The tiny base model: built from config, deterministic, Qwen chat layout, nothing downloaded."""

from pathlib import Path

import pytest

from configs.recipe import CONFIG_DIR, LoraConfig, ModelConfig, load_recipe
from tasks.core.store import ArtifactStore
from tasks.models.model import (
    QuantizationError,
    build_tiny_model,
    load_model_and_tokenizer,
    prepare_base_model,
)
from tasks.training.train import train_seed

from .conftest import SMALLEST_QWEN2, small_training_inputs

TEXTS = ["O produto chegou com defeito e atrasado.", "Recomendo a loja, entrega rápida!"] * 50


def test_tiny_model_is_deterministic_and_speaks_chatml(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    build_tiny_model(SMALLEST_QWEN2, TEXTS, tmp_path / "a")
    build_tiny_model(SMALLEST_QWEN2, TEXTS, tmp_path / "b")
    for name in ("model.safetensors", "tokenizer.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "a")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "a")
    assert model.config.model_type == "qwen2"
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Olá, ação!"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<|im_start|>user\nOlá, ação!<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text  # byte-level: lossless
    assert tokenizer.eos_token == "<|im_end|>"


def test_a_4bit_model_is_refused_loudly_on_cpu_not_run_in_full_precision(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    data, base = small_training_inputs(store)
    nf4 = prepare_base_model(ModelConfig(tiny=SMALLEST_QWEN2, load_in_4bit=True), data, store)
    assert nf4.load_in_4bit and nf4.location == base.location  # same files...
    assert nf4.fingerprint != base.fingerprint  # ...but another starting point for training
    with pytest.raises(
        QuantizationError, match=r"model\.load_in_4bit: NF4 4-bit weights need a CUDA"
    ):
        load_model_and_tokenizer(nf4, store)
    training = load_recipe(CONFIG_DIR / "l4_v42.yaml").training.model_copy(update={"max_steps": 1})
    with pytest.raises(QuantizationError):
        train_seed(training, LoraConfig(), data, nf4, seed=1, store=store)
    assert not store.exists("runs")  # refused before anything was written


def test_pretrained_local_folder_is_fingerprinted_by_content(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    config = ModelConfig(source="pretrained", name_or_path=str(folder))
    first = prepare_base_model(config, None, None)  # type: ignore[arg-type]
    (folder / "config.json").write_text('{"changed": true}')
    assert prepare_base_model(config, None, None).fingerprint != first.fingerprint  # type: ignore[arg-type]
    assert first.location == str(folder) and not first.in_store


@pytest.mark.parametrize("load_in_4bit", [False, True])
def test_on_a_gpu_machine_the_model_is_loaded_onto_the_gpu(
    tmp_path: Path, monkeypatch, load_in_4bit: bool
) -> None:
    """The GPU run's defect: a full-precision model stayed on the CPU and evaluation ran there.
    No GPU here, so the machine is one that says it has one, and the load records its arguments."""
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    store = ArtifactStore(tmp_path)
    _, base = small_training_inputs(store)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(BitsAndBytesConfig, "__init__", lambda self, **_: None)
    loaded: dict = {}
    monkeypatch.setattr(
        AutoModelForCausalLM, "from_pretrained", lambda path, **kwargs: loaded.update(kwargs)
    )
    load_model_and_tokenizer(base.model_copy(update={"load_in_4bit": load_in_4bit}), store)
    assert loaded["device_map"] == {"": 0}
    assert loaded["dtype"] == torch.bfloat16
    assert ("quantization_config" in loaded) is load_in_4bit


def test_on_a_cpu_machine_the_model_stays_on_the_cpu(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    _, base = small_training_inputs(store)
    model, _ = load_model_and_tokenizer(base, store)
    assert model.device.type == "cpu"
