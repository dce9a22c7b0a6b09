"""The fast rollout engine generates what the plain path generates, from fresh weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from configs.recipe import EvalConfig, LoraConfig, TrainingConfig
from tasks.core.store import ArtifactStore
from tasks.generation.answering import generate
from tasks.generation.rollout import FAST, PLAIN, PROMPT_BUCKET, RolloutModel
from tasks.models.model import load_model_and_tokenizer
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


def _optimizer_step(policy, encoded) -> None:
    """One real optimizer step on the adapter, large enough to change greedy outputs."""
    import torch

    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=0.05)
    policy.train()
    loss = policy(**encoded, labels=encoded["input_ids"]).loss
    loss.backward()
    optimizer.step()
    policy.eval()


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


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (9, 3)], ids=["tiny", "smollm2"])
def test_grouped_decode_attention_is_sdpa_without_the_copy(heads: int, kv_heads: int) -> None:
    from types import SimpleNamespace

    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from tasks.generation.attention import grouped_sdpa_forward

    generator = torch.Generator().manual_seed(0)
    rows, cached, dim = 3, 600, 64
    query = torch.randn(rows, heads, 1, dim, generator=generator)
    key, value = (torch.randn(rows, kv_heads, cached, dim, generator=generator) for _ in "kv")
    # Left padding: the rows' prompts start 0, 5 and 20 tokens in.
    mask = torch.arange(cached)[None, :] >= torch.tensor([0, 5, 20])[:, None]
    mask = mask[:, None, None, :]
    module = SimpleNamespace(num_key_value_groups=heads // kv_heads, is_causal=True)
    expected, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=dim**-0.5)
    grouped, _ = grouped_sdpa_forward(module, query, key, value, mask, scaling=dim**-0.5)
    assert torch.equal(grouped, expected)


def test_sampled_fast_decoding_is_the_model_s_own_token_for_token(inputs) -> None:
    """Hot sampling from the same seed: any difference in a decode step's values would show as
    a different token somewhere in 3 x 40 samples."""
    import torch
    from transformers import GenerationConfig

    store, _, base = inputs
    model, tokenizer = load_model_and_tokenizer(base, store)
    encoded = _encoded(tokenizer)
    config = GenerationConfig(
        max_new_tokens=40, min_new_tokens=40, do_sample=True, temperature=1.0, top_k=0,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    torch.manual_seed(5)
    with torch.no_grad():
        own = model.generate(**encoded, generation_config=config)
    assert model.config._attn_implementation == "sdpa"
    fast = RolloutModel(model, FAST)
    assert fast.model.config._attn_implementation == "tucano_grouped_sdpa"
    torch.manual_seed(5)
    tokens = fast.generate(encoded["input_ids"], encoded["attention_mask"], config)
    assert tokens.tolist() == own.tolist()


def test_a_cpu_rollout_decoded_side_by_side_is_generate_s_sample_and_random_stream(
    inputs,
) -> None:
    """GRPO's rollouts on a CPU go through evaluation's decoder: the same tokens `generate`
    samples from the global random state, up to each end of turn, and the state left where
    `generate` leaves it, so training's random stream goes on as before."""
    import torch
    from transformers import GenerationConfig

    from tasks.generation.rollout import completions_until_eos

    store, _, base = inputs
    policy, tokenizer = _adapted(store, base, seed=3)
    encoded = _encoded(tokenizer)
    config = GenerationConfig(
        max_new_tokens=32, do_sample=True, temperature=0.8, top_p=1.0, top_k=0,
        eos_token_id=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    rollout = RolloutModel(policy, FAST)
    assert rollout.decodes_side_by_side(config)
    assert not rollout.decodes_side_by_side(config.__class__(**{**config.to_dict(), "top_k": 5}))
    torch.manual_seed(9)
    with torch.no_grad():
        own = rollout.model.generate(**encoded, generation_config=config)
    after_generate = torch.rand(3)
    torch.manual_seed(9)
    sampled = rollout.sample_side_by_side(encoded["input_ids"], encoded["attention_mask"], config)
    width = encoded["input_ids"].shape[1]
    assert sampled == completions_until_eos(own[:, width:], [tokenizer.eos_token_id])
    assert torch.equal(torch.rand(3), after_generate)


def test_after_an_optimizer_step_sync_folds_in_the_new_adapter(inputs) -> None:
    import torch

    store, _, base = inputs
    policy, tokenizer = _adapted(store, base)
    encoded, config = _encoded(tokenizer), _greedy(tokenizer)
    fast = RolloutModel(policy, FAST)
    before = fast.generate(encoded["input_ids"], encoded["attention_mask"], config)

    _optimizer_step(policy, encoded)
    with torch.no_grad():
        plain_after = policy.generate(**encoded, generation_config=config)
    assert plain_after.tolist() != before.tolist()

    stale = fast.generate(encoded["input_ids"], encoded["attention_mask"], config)
    assert stale.tolist() == before.tolist()  # no sync, no new weights: documented, not hidden
    fast.sync(step=1)
    fresh = fast.generate(encoded["input_ids"], encoded["attention_mask"], config)
    assert fresh.tolist() == plain_after.tolist()
    assert fast.synced_step == 1


@pytest.fixture
def builds(monkeypatch):
    """Every model constructed and every module executed outside the import system, from now on:
    what building a rollout copy and its pristine class costs."""
    import importlib.util

    from transformers import PreTrainedModel

    made: dict[str, list[str]] = {"models": [], "modules": []}
    construct, load = PreTrainedModel.__init__, importlib.util.module_from_spec

    def counted_init(self, *args, **kwargs):
        made["models"].append(type(self).__name__)
        construct(self, *args, **kwargs)

    def counted_load(spec):
        made["modules"].append(spec.name)
        return load(spec)

    monkeypatch.setattr(PreTrainedModel, "__init__", counted_init)
    monkeypatch.setattr(importlib.util, "module_from_spec", counted_load)
    return made


def test_rollout_copies_of_two_models_share_their_class_and_forward(inputs) -> None:
    store, _, base = inputs
    first, _ = _adapted(store, base, seed=0)
    second, _ = _adapted(store, base, seed=1)
    copies = [RolloutModel(policy, FAST).model for policy in (first, second)]
    assert copies[0] is not copies[1]  # each model folds its own weights
    # torch.compile guards on the forward's code object: one class, one compiled graph.
    assert type(copies[0]) is type(copies[1])
    assert type(copies[0]).forward.__code__ is type(copies[1]).forward.__code__
    # Still transformers' class from its own execution, not the one Unsloth would patch.
    live = type(first.get_base_model())
    assert type(copies[0]) is not live and type(copies[0]).__name__ == live.__name__


def test_a_compiled_engine_compiles_once_for_more_calls_and_a_second_model(inputs) -> None:
    """What the static cache does on a GPU, on the CPU: transformers compiles the copy's forward
    (here with the eager backend, which needs no C compiler), and each call makes its own
    RolloutModel, as every evaluation call does."""
    import torch
    from torch._dynamo.utils import counters
    from transformers import CompileConfig

    store, _, base = inputs
    first, tokenizer = _adapted(store, base, seed=0)
    second, _ = _adapted(store, base, seed=1)
    encoded, config = _encoded(tokenizer), _greedy(tokenizer, 4)
    config.compile_config = CompileConfig(backend="eager")
    config.compile_config._compile_all_devices = True  # transformers' switch for testing on CPU
    torch._dynamo.reset()
    graphs = []
    for policy in (first, first, second):
        compiled = counters["stats"]["unique_graphs"]
        rollout = RolloutModel(policy, FAST, static_cache=True)
        rollout.generate(encoded["input_ids"], encoded["attention_mask"], config)
        graphs.append(counters["stats"]["unique_graphs"] - compiled)
    assert graphs == [1, 0, 0]


def test_a_second_evaluation_call_builds_nothing_and_matches_a_fresh_model(inputs, request) -> None:
    store, _, base = inputs
    config = EvalConfig(max_new_tokens=12, batch_size=2)
    policy, tokenizer = _adapted(store, base)
    generate(policy, tokenizer, PROMPTS[:2], config)
    built = request.getfixturevalue("builds")
    again = generate(policy, tokenizer, PROMPTS, config)  # other prompts, other batches
    assert built == {"models": [], "modules": []}
    fresh, fresh_tokenizer = _adapted(store, base)
    loaded = len(built["models"])
    assert generate(fresh, fresh_tokenizer, PROMPTS, config) == again
    assert len(built["models"]) > loaded  # a new model builds its copy: the spy does see it


def test_the_kept_copy_folds_in_weights_changed_since_the_last_call(inputs, request) -> None:
    import torch

    store, _, base = inputs
    greedy = EvalConfig(max_new_tokens=24, do_sample=False, batch_size=3)
    policy, tokenizer = _adapted(store, base)
    before = generate(policy, tokenizer, PROMPTS, greedy)
    # An adapter step, as more training would make, and a frozen weight outside any adapter.
    _optimizer_step(policy, _encoded(tokenizer))
    with torch.no_grad():
        norm = policy.get_base_model().model.norm.weight
        norm.copy_(torch.randn(norm.shape, generator=torch.Generator().manual_seed(0)))
    built = request.getfixturevalue("builds")
    after = generate(policy, tokenizer, PROMPTS, greedy)
    assert built["models"] == []  # the same copy as the first call, not a new one
    plain_engine = greedy.model_copy(update={"rollout_engine": PLAIN})
    assert after == generate(policy, tokenizer, PROMPTS, plain_engine)
    assert after != before


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


def _saved_adapter(store, base, tmp_path: Path, *, trained: bool):
    """The run's start as GRPO exports it when no step beat it (PEFT's own initialisation, B
    zero), or the same after one optimizer step."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import get_peft_model

    from tasks.core.manifests import Adapter

    model, tokenizer = load_model_and_tokenizer(base, store)
    policy = get_peft_model(model, PeftLoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    if trained:
        _optimizer_step(policy, _encoded(tokenizer))
    policy.save_pretrained(tmp_path / "adapter")
    folder = f"runs/{'trained' if trained else 'start'}/best"
    store.put_dir(tmp_path / "adapter", folder)
    return Adapter(
        fingerprint=store.dir_digest(folder), seed=5, run_key="k", folder=folder,
        log_history="", global_step=4, best_step=None if trained else 0,
    )  # fmt: skip


@pytest.mark.parametrize("trained", [False, True], ids=["kept-start", "trained"])
def test_a_seed_that_kept_its_start_is_scored_on_the_start_s_answers_exactly(
    inputs, tmp_path: Path, trained: bool
) -> None:
    """Sampled at evaluation's temperature, a kept start says word for word what the start model
    says, so evaluation reuses the start's answers; an adapter that learned anything is run."""
    from tasks.evaluation.evaluate import adds_nothing, evaluate_model

    store, data, base = inputs
    config = EvalConfig(max_new_tokens=24, batch_size=4)
    adapter = _saved_adapter(store, base, tmp_path, trained=trained)
    assert adds_nothing(adapter, store) is not trained
    start = evaluate_model(config, data, base, None, store)
    # Read at once: both ways write the same file (one identity).
    reused = store.read_jsonl(
        evaluate_model(config, data, base, adapter, store, start_rows=start).rows
    )
    generated = store.read_jsonl(evaluate_model(config, data, base, adapter, store).rows)
    assert reused == generated
    said = [row["completion"] for row in store.read_jsonl(start.rows)]
    assert (said == [row["completion"] for row in generated]) is not trained
