"""Which backend loads the policy, and what each needs: chosen from the machine, never silently
swapped for a request it cannot honour."""

from __future__ import annotations

from pathlib import Path

import pytest

from configs.recipe import LoraConfig, TrainingConfig
from tasks.core.store import ArtifactStore
from tasks.models.backends import (
    PEFT,
    UNSLOTH,
    BackendError,
    load_policy,
    longest_prompt,
    machine_backend,
    resolve_backend,
)
from tasks.training.train import run_key

from .conftest import small_training_inputs


@pytest.mark.parametrize(
    ("requested", "cuda", "unsloth", "expected"),
    [
        ("auto", True, True, UNSLOTH),
        ("auto", True, False, PEFT),
        ("auto", False, True, PEFT),
        ("auto", False, False, PEFT),
        ("peft", True, True, PEFT),
        ("peft", False, False, PEFT),
        ("unsloth", True, True, UNSLOTH),
    ],
)
def test_backend_follows_the_machine(requested, cuda, unsloth, expected) -> None:
    assert resolve_backend(requested, cuda, unsloth) == expected


@pytest.mark.parametrize(
    ("cuda", "unsloth", "missing"),
    [
        (False, True, "a CUDA GPU"),
        (True, False, "the unsloth package"),
        (False, False, "a CUDA GPU"),
    ],
)
def test_asking_for_unsloth_where_it_cannot_run_is_an_error(cuda, unsloth, missing) -> None:
    with pytest.raises(BackendError, match=f"training\\.backend: unsloth needs {missing}"):
        resolve_backend("unsloth", cuda, unsloth)


def test_this_cpu_machine_trains_with_peft() -> None:
    assert machine_backend("auto") == PEFT
    with pytest.raises(BackendError):
        machine_backend("unsloth")


def test_peft_policy_is_the_base_model_plus_the_recipes_lora(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    _, base = small_training_inputs(store)
    policy = load_policy(PEFT, base, LoraConfig(r=4, alpha=8), 1, 0, store)
    assert policy.model.config.model_type == "qwen2"
    assert not hasattr(policy.model, "peft_config")  # GRPOTrainer adds the adapter
    assert (policy.peft_config.r, policy.peft_config.lora_alpha) == (4, 8)
    assert policy.peft_config.target_modules == "all-linear"


def test_the_longest_prompt_is_counted_in_tokens_of_the_chat_layout(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    data, base = small_training_inputs(store)
    prompts = [row["prompt"] for row in store.read_jsonl(data.train)]
    longest = longest_prompt(base, store, prompts)
    longer = [*prompts, [{"role": "user", "content": "palavra " * 2000}]]
    assert 10 < longest < longest_prompt(base, store, longer)


def test_the_backend_is_part_of_the_run_key(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    data, base = small_training_inputs(store)
    keys = {run_key(TrainingConfig(), LoraConfig(), data, base, 1, b) for b in (PEFT, UNSLOTH)}
    assert len(keys) == 2  # neither resumes from the other's checkpoints


UNSLOTH_PROBE = """
import json, os, sys
loaded = sorted(m for m in ("transformers", "trl", "peft") if m in sys.modules)
with open(os.environ["UNSLOTH_PROBE"], "w") as probe:
    json.dump(loaded, probe)
raise SystemExit(0)  # the probe has seen what it came for; nothing else of Unsloth's is here
"""

BUILD_ON_UNSLOTH = """
import json, sys
from pathlib import Path
from configs.recipe import LoraConfig, TrainingConfig
from tasks.core.manifests import BaseModelArtifact, PreparedData
from tasks.core.store import ArtifactStore
from tasks.models import backends
from tasks.training import train

train.machine_backend = lambda requested: backends.UNSLOTH  # as on a GPU with the gpu extra
data, base, store, workdir = sys.argv[1:]
train.build_trainer(
    TrainingConfig(heldout_prompts=0), LoraConfig(), PreparedData.model_validate_json(data),
    BaseModelArtifact.model_validate_json(base), 1, ArtifactStore(store), Path(workdir),
)
"""


def test_unsloth_is_imported_before_anything_loads_transformers(tmp_path: Path) -> None:
    """Unsloth patches transformers, PEFT and TRL only when imported first (it warns it may run
    slower otherwise): the GPU run showed the tokenizer that sizes the sequences loading first.
    A stand-in `unsloth` records what was loaded when it was imported."""
    import json
    import os
    import subprocess
    import sys

    store = ArtifactStore(tmp_path / "store")
    data, base = small_training_inputs(store)
    (tmp_path / "fake" / "unsloth").mkdir(parents=True)
    (tmp_path / "fake" / "unsloth" / "__init__.py").write_text(UNSLOTH_PROBE)
    probe = tmp_path / "loaded.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "fake"), "UNSLOTH_PROBE": str(probe)}
    arguments = [data.model_dump_json(), base.model_dump_json(), str(store.root), str(tmp_path)]
    subprocess.run(
        [sys.executable, "-c", BUILD_ON_UNSLOTH, *arguments], env=env, check=True, timeout=300
    )
    assert json.loads(probe.read_text()) == []


def _dtypes_of_training_matmuls(monkeypatch) -> set:
    """The dtypes linear layers compute in while gradients are on (training, not generation)."""
    import torch

    seen: set = set()
    forward = torch.nn.Linear.forward

    def recording(self, *args, **kwargs):
        output = forward(self, *args, **kwargs)
        if torch.is_grad_enabled():
            seen.add(output.dtype)
        return output

    monkeypatch.setattr(torch.nn.Linear, "forward", recording)
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("cpu_bf16", [True, False])
def test_sft_and_grpo_train_under_bf16_autocast_only_where_asked(
    tmp_path: Path, monkeypatch, cpu_bf16: bool
) -> None:
    """cpu_bf16 on a CPU with the instructions: real SFT and GRPO steps run their layers in
    bfloat16 (the weights stay float32); off, in float32."""
    import torch

    from configs.recipe import SftConfig
    from tasks.models.model import load_model_and_tokenizer
    from tasks.training.sft import train_sft
    from tasks.training.train import train_seed

    if not torch.cpu._is_avx512_bf16_supported():
        pytest.skip("this CPU has no avx512_bf16: the fallback test covers it")
    store = ArtifactStore(tmp_path)
    data, base = small_training_inputs(store)
    seen = _dtypes_of_training_matmuls(monkeypatch)
    sft = SftConfig(enabled=True, max_steps=1, batch_size=2, cpu_bf16=cpu_bf16)
    start = train_sft(sft, LoraConfig(r=4, alpha=8), data, base, store)
    in_sft = set(seen)
    seen.clear()
    training = TrainingConfig(
        num_generations=2, prompts_per_step=2, max_completion_length=8, max_steps=1,
        heldout_prompts=0, cpu_bf16=cpu_bf16,
    )  # fmt: skip
    adapter = train_seed(training, LoraConfig(r=4, alpha=8), data, start, seed=1, store=store)
    assert [e["step"] for e in store.read_json(adapter.log_history) if "loss" in e] == [1]
    computed_in = torch.bfloat16 if cpu_bf16 else torch.float32
    assert in_sft == {computed_in}
    assert seen == {computed_in}  # GRPO's
    model, _ = load_model_and_tokenizer(start, store)  # SFT's merged weights
    assert {weight.dtype for weight in model.parameters()} == {torch.float32}


def test_a_cpu_without_bf16_instructions_trains_in_float32_and_says_so(monkeypatch, caplog) -> None:
    import torch

    from tasks.models.backends import bf16_training

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    with caplog.at_level("WARNING", logger="tucano.train"):
        assert bf16_training(cpu_bf16=True) is False
    assert "no avx512_bf16" in caplog.text
    assert bf16_training(cpu_bf16=False) is False
