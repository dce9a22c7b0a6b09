"""Dynamic sampling: zero-variance groups are dropped and the batch refilled, shape intact."""

import pytest
import torch

from configs.recipe import LoraConfig, TrainingConfig
from tasks.core.store import ArtifactStore
from tasks.training.dynamic_sampling import (
    PromptStream,
    concat_batches,
    informative_groups,
    select_groups,
)
from tasks.training.train import train_seed

from .conftest import small_training_inputs

PAD = 0


def _batch(advantages: list[float], prompt_len: int, completion_len: int) -> dict:
    n = len(advantages)
    return {
        "prompt_ids": torch.full((n, prompt_len), 7),
        "prompt_mask": torch.ones(n, prompt_len, dtype=torch.long),
        "completion_ids": torch.full((n, completion_len), 9),
        "completion_mask": torch.ones(n, completion_len, dtype=torch.long),
        "advantages": torch.tensor(advantages),
        "num_items_in_batch": torch.tensor(n * completion_len),
    }


def test_zero_advantage_groups_are_found() -> None:
    advantages = torch.tensor([0.0, 0.0, 0.3, -0.3, 1e-9, -1e-9])
    assert informative_groups(advantages, 2).tolist() == [False, True, False]


def test_batches_of_different_lengths_are_padded_on_the_right_side() -> None:
    a = select_groups(_batch([0.1, -0.1, 0.0, 0.0], 3, 2), torch.tensor([0]), 2)
    b = _batch([0.2, -0.2], 5, 4)
    merged = concat_batches([a, b], PAD)
    assert merged["prompt_ids"].shape == (4, 5) and merged["completion_ids"].shape == (4, 4)
    assert merged["prompt_ids"][0].tolist() == [PAD, PAD, 7, 7, 7]  # prompts: left
    assert merged["prompt_mask"][0].tolist() == [0, 0, 1, 1, 1]
    assert merged["completion_ids"][0].tolist() == [9, 9, PAD, PAD]  # completions: right
    assert merged["completion_mask"][0].tolist() == [1, 1, 0, 0]
    assert int(merged["num_items_in_batch"]) == 2 * 2 + 2 * 4
    assert merged["advantages"].tolist() == pytest.approx([0.1, -0.1, 0.2, -0.2])


def test_groups_are_selected_on_the_device_the_advantages_are_on() -> None:
    # The first GPU run of the pipeline (an H200) failed here at step 1: the group indices come
    # from the advantages, on the GPU, and the row offsets were made on the CPU. The meta device
    # stands for a GPU: it refuses a CPU operand as CUDA does.
    batch = {key: value.to("meta") for key, value in _batch([0.1, -0.1, 0.0, 0.0], 3, 2).items()}
    kept = select_groups(batch, torch.tensor([0], device="meta"), 2)
    assert kept["completion_ids"].device.type == "meta"
    assert kept["completion_ids"].shape == (2, 2)


def test_prompt_stream_is_seeded_endless_and_resumable(tmp_path) -> None:
    rows = [{"id": i} for i in range(5)]
    first = PromptStream(rows, seed=3, resume=None)
    drawn = first.take(12)
    assert sorted(r["id"] for r in drawn[:5]) == list(range(5))  # a full pass, then another
    (tmp_path / "dynamic_sampling.json").write_text('{"position": 7}')
    resumed = PromptStream(rows, seed=3, resume=tmp_path)
    assert resumed.take(5) == drawn[7:12]


@pytest.mark.slow
def test_training_refills_batches_and_logs_it(tmp_path) -> None:
    store = ArtifactStore(tmp_path)
    data, base = small_training_inputs(store)
    training = TrainingConfig(
        learning_rate=1e-3,
        num_generations=4,
        prompts_per_step=2,
        max_completion_length=12,
        max_steps=4,
        save_steps=4,
        heldout_prompts=0,
        dynamic_sampling={"enabled": True, "max_refills": 2},
    )
    adapter = train_seed(training, LoraConfig(), data, base, seed=5, store=store)
    history = [h for h in store.read_json(adapter.log_history) if "reward" in h]
    assert len(history) == 4
    refills = [h["dynamic_sampling/refills"] for h in history]
    informative = [h["dynamic_sampling/informative_frac"] for h in history]
    # A random tiny model never writes JSON: extraction groups are all-zero and get replaced.
    assert any(r > 0 for r in refills) and all(0 <= r <= 2 for r in refills)
    assert all(0.0 <= f <= 1.0 for f in informative)
    checkpoint = f"runs/{adapter.run_key}/checkpoints/checkpoint-4/dynamic_sampling.json"
    assert store.read_json(checkpoint)["position"] == 2 * sum(refills)


def test_a_stratified_prompt_stream_refills_with_cross_sections() -> None:
    rows = [{"id": i, "task": "extraction", "review_score": 1 if i < 6 else 5} for i in range(12)]
    stream = PromptStream(rows, seed=3, resume=None, stratified=True)
    for _ in range(6):  # three passes of refills of four
        assert sorted(row["review_score"] for row in stream.take(4)) == [1, 1, 5, 5]
