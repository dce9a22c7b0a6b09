"""Generation settings come from the recipe, never from the model's generation_config.json.

The V4.2 reports' first run trained at temperature 0.1 because the model's generation_config said
so, and every rollout of a group came out the same: no variance, no gradient.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from transformers import GenerationConfig
from transformers.generation.utils import GenerationMixin

from configs.recipe import LoraConfig, ModelConfig, TrainingConfig
from tasks.core.manifests import BaseModelArtifact, PreparedData
from tasks.core.store import ArtifactStore
from tasks.models.model import prepare_base_model
from tasks.training.train import train_seed

from .conftest import SMALLEST_QWEN2

pytestmark = pytest.mark.slow


def poisoned_copy(
    store: ArtifactStore, base: BaseModelArtifact, data: PreparedData, tmp_path: Path
) -> tuple[ArtifactStore, BaseModelArtifact]:
    """A copy of the model with the V4.2 model's poisonous defaults, and the data, in a store of
    their own."""
    folder = Path(shutil.copytree(store.local_dir(base.location), tmp_path / "model"))
    poisoned = GenerationConfig.from_pretrained(folder)
    poisoned.update(do_sample=True, temperature=0.1, top_p=0.5, top_k=5)
    poisoned.save_pretrained(folder)
    copy = ArtifactStore(tmp_path / "store")
    copy.put_dir(folder, base.location)
    copy.put_dir(store.local_dir(data.folder), data.folder)
    return copy, base.model_copy(update={"fingerprint": copy.dir_digest(base.location)})


def record_sampling(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """(temperature, top_p, top_k) of every sampling loop from now on: transformers' own, and
    the side-by-side decoder's (a CPU's rollouts and evaluation)."""
    from tasks.generation import decoding

    seen: list[tuple] = []
    original, side_by_side = GenerationMixin._sample, decoding.decode_side_by_side

    def record(config) -> None:
        seen.append((config.temperature, config.top_p, config.top_k))

    def spy(self, input_ids, logits_processor, stopping_criteria, generation_config, *a, **k):
        record(generation_config)
        return original(
            self, input_ids, logits_processor, stopping_criteria, generation_config, *a, **k
        )

    def decoded(model, batches, generation_config, rows):
        if generation_config.do_sample:
            record(generation_config)
        return side_by_side(model, batches, generation_config, rows)

    monkeypatch.setattr(GenerationMixin, "_sample", spy)
    monkeypatch.setattr(decoding, "decode_side_by_side", decoded)
    return seen


def test_a_model_saying_temperature_0_1_still_trains_at_the_recipes_temperature(
    prepared, tmp_path, monkeypatch
) -> None:
    store, data = prepared
    base = prepare_base_model(ModelConfig(tiny=SMALLEST_QWEN2), data, store)
    copy, base = poisoned_copy(store, base, data, tmp_path)
    seen = record_sampling(monkeypatch)
    training = TrainingConfig(
        num_generations=4,
        prompts_per_step=1,
        max_completion_length=8,
        max_steps=1,
        temperature=1.0,
        top_p=1.0,
    )
    train_seed(training, LoraConfig(), data, base, seed=1, store=copy)
    assert seen, "no sampling happened"
    for temperature, top_p, top_k in seen:
        assert temperature == 1.0
        assert top_p == 1.0
        assert top_k in (0, None)
