"""Batches decoded side by side give every token that each batch's own `generate` gives."""

from __future__ import annotations

import pytest

from configs.recipe import EvalConfig
from tasks.core.store import ArtifactStore
from tasks.generation.answering import generate
from tasks.generation.decoding import decode_side_by_side
from tasks.generation.rollout import FAST, PLAIN
from tasks.models.model import load_model_and_tokenizer

from .conftest import small_training_inputs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    store = ArtifactStore(tmp_path_factory.mktemp("decoding-store"))
    data, base = small_training_inputs(store)
    model, tokenizer = load_model_and_tokenizer(base, store)
    model.eval()
    prompts = [row["prompt"] for row in store.read_jsonl(data.eval)]
    prompts += [row["prompt"] for row in store.read_jsonl(data.train)[:5]]
    # Six train prompts of each of two tasks, grouped by task as the eval split is.
    train = store.read_jsonl(data.train)
    by_task = [
        [row["prompt"] for row in train if row["task"] == task][:6]
        for task in ("extraction", "sql_qa")
    ]
    return model, tokenizer, prompts, by_task[0] + by_task[1]


def _batches(tokenizer, prompts, size: int, seed: int):
    tokenizer.padding_side = "left"
    texts = [
        tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]
    for start in range(0, len(texts), size):
        encoded = tokenizer(
            texts[start : start + size], return_tensors="pt", padding=True, add_special_tokens=False
        )
        yield encoded["input_ids"], encoded["attention_mask"], seed + start


def _config(tokenizer, *, temperature: float, ends: list[int], top_p: float = 1.0):
    from transformers import GenerationConfig

    return GenerationConfig(
        max_new_tokens=24, do_sample=True, temperature=temperature, top_p=top_p, top_k=0,
        eos_token_id=ends, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip


def _own_generate(model, batches, config) -> list[list[list[int]]]:
    """Each batch through transformers' `generate`, seeded as evaluation seeds it."""
    import torch

    from tasks.generation.rollout import completions_until_eos

    answers = []
    for input_ids, mask, seed in batches:
        torch.manual_seed(seed)
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=mask, generation_config=config)
        answers.append(completions_until_eos(out[:, input_ids.shape[1] :], config.eos_token_id))
    return answers


@pytest.mark.parametrize(
    "temperature, top_p, rows",
    [(1.0, 1.0, 4), (0.1, 1.0, 5), (1.0, 0.9, 64), (1.0, 1.0, 1)],
    ids=["hot-4-rows", "eval-temperature-5-rows", "top-p-all-rows", "one-row-a-batch-alone"],
)
def test_side_by_side_gives_each_batch_s_own_tokens(tiny, temperature, top_p, rows) -> None:
    model, tokenizer, prompts, _ = tiny
    # Frequent tokens end answers too, so answers end at many lengths and rows leave and join
    # the pass at different steps.
    common = _common_tokens(tokenizer, prompts, 30)
    config = _config(
        tokenizer, temperature=temperature, top_p=top_p, ends=[tokenizer.eos_token_id, *common]
    )
    own = _own_generate(model, _batches(tokenizer, prompts, 3, 11), config)
    together = list(decode_side_by_side(model, _batches(tokenizer, prompts, 3, 11), config, rows))
    assert together == own
    lengths = {len(answer) for batch in own for answer in batch}
    assert len(lengths) >= 3 and max(lengths) == 24  # ended at several lengths, and cut


def test_a_shared_system_message_is_prefilled_once_and_every_token_stays(tiny) -> None:
    """Batches of one task's prompts start with the same system message: prefilled once for all
    of them, then each row's own tokens after it, the answers are still each batch's own."""
    from tasks.generation.decoding import MIN_SHARED_PREFIX, _shared_prefix

    model, tokenizer, _, prompts = tiny
    batches = list(_batches(tokenizer, prompts, 3, 5))
    assert all(
        _shared_prefix(ids, (mask.shape[1] - mask.sum(-1)).tolist()) >= MIN_SHARED_PREFIX
        for ids, mask, _ in batches
    )
    common = _common_tokens(tokenizer, prompts, 30)
    config = _config(tokenizer, temperature=1.0, ends=[tokenizer.eos_token_id, *common])
    prefills = []
    hook = model.register_forward_pre_hook(
        lambda _, args, kwargs: prefills.append(kwargs["input_ids"].shape), with_kwargs=True
    )
    try:
        together = list(decode_side_by_side(model, iter(batches), config, 6))
    finally:
        hook.remove()
    assert together == _own_generate(model, batches, config)
    # Four batches, two tasks: each task's system message is computed once, in a pass of one row
    # (a decode step reads one token a row).
    assert sum(rows == 1 and length > 1 for rows, length in prefills) == 2


def test_prefilling_the_shared_tokens_once_gives_the_logits_of_the_whole_prompts(
    tiny, monkeypatch
) -> None:
    """Up to float rounding (the shared tokens' keys are computed in a pass of their own and
    each row's padding sits after them): a wrong position or mask would move them by far more."""
    import torch

    from tasks.generation import decoding

    model, tokenizer, _, prompts = tiny
    # One store of prefixes for every batch: the second batch of a task starts from the keys
    # and values its first batch computed.
    prefixes = decoding._Prefixes()
    for input_ids, mask, _ in _batches(tokenizer, prompts, 3, 0):
        assert (
            decoding._shared_prefix(input_ids, (mask.shape[1] - mask.sum(-1)).tolist())
            >= decoding.MIN_SHARED_PREFIX
        )
        with torch.no_grad():
            once, _ = decoding._prefill(
                model, input_ids, mask, decoding._prefill_cache(model, 4), prefixes
            )
            with monkeypatch.context() as patch:
                patch.setattr(decoding, "MIN_SHARED_PREFIX", input_ids.shape[1])
                whole, _ = decoding._prefill(
                    model, input_ids, mask, decoding._prefill_cache(model, 4), decoding._Prefixes()
                )
        torch.testing.assert_close(once, whole, rtol=0, atol=1e-6)
    assert len(prefixes.known) == 2  # one per task


def _common_tokens(tokenizer, prompts, count: int) -> list[int]:
    from collections import Counter

    text = " ".join(message["content"] for prompt in prompts for message in prompt)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return [token for token, _ in Counter(ids).most_common(count + 1)[1:]]


def test_evaluation_s_answers_are_the_plain_engine_s(tiny) -> None:
    """The product's `generate` (side by side, on the CPU) against the plain engine (each batch
    through the model's own `generate`), sampled hot so that any difference shows."""
    model, tokenizer, prompts, _ = tiny
    config = EvalConfig(temperature=1.5, max_new_tokens=20, batch_size=3, decode_rows=7, seed=3)
    fast = generate(model, tokenizer, prompts, config.model_copy(update={"rollout_engine": FAST}))
    plain = generate(model, tokenizer, prompts, config.model_copy(update={"rollout_engine": PLAIN}))
    assert fast == plain
    assert len({row["completion"] for row in fast}) == len(prompts)


def test_a_model_that_does_not_cache_every_layer_whole_is_refused() -> None:
    """A sliding-window layer keeps only its window: joining and trimming rows as whole caches
    would silently break it."""
    from types import SimpleNamespace

    from transformers import Qwen2Config

    from tasks.generation.decoding import _prefill_cache

    config = Qwen2Config(
        num_hidden_layers=2, use_sliding_window=True, sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
    )  # fmt: skip
    with pytest.raises(ValueError, match="DynamicSlidingWindowLayer"):
        _prefill_cache(SimpleNamespace(config=config), 4)
