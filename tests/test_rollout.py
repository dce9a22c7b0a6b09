"""The fast rollout engine generates what the plain path generates, from fresh weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from configs.recipe import LoraConfig, TrainingConfig
from tasks.core.store import ArtifactStore
from tasks.training.model import load_model_and_tokenizer
from tasks.training.rollout import FAST, PLAIN, PROMPT_BUCKET, RolloutModel
from tasks.training.train import build_trainer, train_seed

from .conftest import small_training_inputs

PROMPTS = [
    [{"role": "user", "content": "Resuma a avaliação: produto chegou quebrado."}],
    [{"role": "user", "content": "Qual o estado com mais pedidos?"}],
    [{"role": "user", "content": "Escreva uma notificação curta."}],
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    store = ArtifactStore(tmp_path_factory.mktemp("rollout-store"))
    return store, *small_training_inputs(store)


def _adapted(store, base, seed: int = 0):
    """The tiny model with a LoRA adapter whose B is not zero, so the adapter changes outputs."""
    import torch
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    model, tokenizer = load_model_and_tokenizer(base, store)
    torch.manual_seed(seed)
    config = PeftLoraConfig(
        r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False
    )
    return get_peft_model(model, config), tokenizer


def _encoded(tokenizer):
    tokenizer.padding_side = "left"
    texts = [
        tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
        for p in PROMPTS
    ]
    return tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)


def _greedy(tokenizer, max_new_tokens: int = 24):
    from transformers import GenerationConfig

    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )


@pytest.mark.parametrize("static_cache", [False, True], ids=["dynamic-cache", "static-cache"])
def test_greedy_fast_engine_emits_exactly_the_plain_tokens(inputs, static_cache: bool) -> None:
    store, _, base = inputs
    policy, tokenizer = _adapted(store, base)
    encoded, config = _encoded(tokenizer), _greedy(tokenizer)
    plain = RolloutModel(policy, PLAIN).generate(
        encoded["input_ids"], encoded["attention_mask"], config
    )
    fast = RolloutModel(policy, FAST, static_cache=static_cache)
    assert fast.model is not policy  # a bare copy, no LoRA wrappers
    assert not any("lora" in name for name, _ in fast.model.named_parameters())
    tokens = fast.generate(encoded["input_ids"], encoded["attention_mask"], config)
    assert tokens.shape == plain.shape
    assert tokens.tolist() == plain.tolist()
    # The adapter matters: without it the model says something else, so agreement means something.
    with policy.disable_adapter():
        bare = policy.generate(**encoded, generation_config=config)
    assert bare.tolist() != plain.tolist()


def test_static_cache_pads_every_batch_to_one_shape_and_hands_back_the_callers(inputs) -> None:
    store, _, base = inputs
    policy, tokenizer = _adapted(store, base)
    encoded, config = _encoded(tokenizer), _greedy(tokenizer, 6)
    width = encoded["input_ids"].shape[1]
    plain = RolloutModel(policy, PLAIN).generate(
        encoded["input_ids"], encoded["attention_mask"], config
    )
    fast = RolloutModel(policy, FAST, static_cache=True)
    shapes = []
    generate = fast.model.generate
    fast.model.generate = lambda **kw: shapes.append(tuple(kw["input_ids"].shape)) or generate(**kw)
    widest = width + PROMPT_BUCKET + 1  # the run's longest prompt, longer than this batch's
    tokens = fast.generate(
        encoded["input_ids"], encoded["attention_mask"], config, width=widest, rows=5
    )
    assert shapes == [(5, -(-widest // PROMPT_BUCKET) * PROMPT_BUCKET)]
    assert tokens.tolist() == plain.tolist()  # same tokens, the caller's rows and columns


def test_after_an_optimizer_step_sync_folds_in_the_new_adapter(inputs) -> None:
    import torch

    store, _, base = inputs
    policy, tokenizer = _adapted(store, base)
    encoded, config = _encoded(tokenizer), _greedy(tokenizer)
    fast = RolloutModel(policy, FAST)
    before = fast.generate(encoded["input_ids"], encoded["attention_mask"], config)

    # One real optimizer step on the adapter, large enough to change greedy outputs.
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=0.05)
    policy.train()
    loss = policy(**encoded, labels=encoded["input_ids"]).loss
    loss.backward()
    optimizer.step()
    policy.eval()
    with torch.no_grad():
        plain_after = policy.generate(**encoded, generation_config=config)
    assert plain_after.tolist() != before.tolist()

    stale = fast.generate(encoded["input_ids"], encoded["attention_mask"], config)
    assert stale.tolist() == before.tolist()  # no sync, no new weights: documented, not hidden
    fast.sync(step=1)
    fresh = fast.generate(encoded["input_ids"], encoded["attention_mask"], config)
    assert fresh.tolist() == plain_after.tolist()
    assert fast.synced_step == 1


def test_grpo_trainer_syncs_its_rollout_copy_after_each_optimizer_step(inputs, tmp_path) -> None:
    import torch

    store, data, base = inputs
    training = TrainingConfig(
        learning_rate=5e-2, num_generations=2, prompts_per_step=2, max_completion_length=8,
        max_steps=2, save_steps=2, heldout_prompts=0,
    )  # fmt: skip
    run = build_trainer(training, LoraConfig(), data, base, 3, store, tmp_path)
    trainer = run.trainer
    # A non-zero adapter from the start: the fold must differ from the base weights.
    torch.manual_seed(0)
    for name, parameter in trainer.model.named_parameters():
        if "lora_B" in name:
            parameter.data.normal_(0, 0.1)
    synced = []
    trainer.train()
    rollout = trainer._rollout
    assert rollout is not None and rollout.synced_step == 1  # the last rollout was after step 1
    original_sync = rollout.sync
    rollout.sync = lambda step: synced.append(step) or original_sync(step)
    # The next rollout, after step 2's optimizer step, generates from the weights of step 2.
    trainer._generate_single_turn([[1, 2, 3]], None, {}, 1)
    assert synced == [2]
    policy = trainer.accelerator.unwrap_model(trainer.model).get_base_model()
    layer = policy.get_submodule("model.layers.0.self_attn.q_proj")
    folded = layer.get_base_layer().weight + layer.get_delta_weight("default")
    copied = rollout.model.get_submodule("model.layers.0.self_attn.q_proj").weight
    assert torch.allclose(copied, folded, atol=1e-6)
    assert not torch.allclose(copied, layer.get_base_layer().weight, atol=1e-4)


@pytest.mark.slow
def test_sampled_training_matches_the_plain_path_on_the_same_seed(tmp_path: Path) -> None:
    """Same seed, same data: the fast engine samples from the same distribution with the same
    random numbers, so rewards and losses agree step by step. The merged weights differ from the
    wrapped ones by float32 rounding (~1e-7 relative), which can flip a sampled token only when
    two cumulative probabilities sit within that of a uniform draw: rare, so nearly every step is
    identical; the tolerance allows one changed completion in a group of rewards."""
    histories = {}
    for engine in (PLAIN, FAST):
        store = ArtifactStore(tmp_path / engine)
        data, base = small_training_inputs(store)
        training = TrainingConfig(
            rollout_engine=engine, learning_rate=1e-3, num_generations=4, prompts_per_step=2,
            max_completion_length=16, max_steps=4, save_steps=4, heldout_prompts=0,
        )  # fmt: skip
        adapter = train_seed(training, LoraConfig(), data, base, seed=11, store=store)
        histories[engine] = [e for e in store.read_json(adapter.log_history) if "reward" in e]
    assert len(histories[PLAIN]) == len(histories[FAST]) == 4
    for plain, fast in zip(histories[PLAIN], histories[FAST], strict=True):
        assert fast["reward"] == pytest.approx(plain["reward"], abs=0.15)
        assert fast["loss"] == pytest.approx(plain["loss"], abs=0.05)
        assert fast["completions/mean_length"] == pytest.approx(
            plain["completions/mean_length"], abs=4
        )
