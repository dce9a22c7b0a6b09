"""Evaluation's batches decoded side by side, each answer the one its batch alone gives.

Evaluation answers its prompts in batches of `batch_size`, each sampled from a seed of its own,
and a batch decodes until its longest answer ends. On a CPU a decode step reads every weight
whatever the number of rows, so the rows whose answers ended, and the prompts waiting for the
next batch, were time paid for nothing. Here the rows of consecutive batches share each forward
pass, up to `rows` of them: a row leaves when its answer ends, and the next batch comes in
(prefilled on its own) as soon as its rows fit. A batch's prefill reads the tokens its rows all
start with (a task's system message) once, and the batches after it that start with them reuse
those keys and values: a task's system message is computed once an evaluation.

Each answer is still the one its batch gives alone. A batch keeps a generator seeded as its
`generate` call was and draws from it, at every step until its last answer ends, what
`torch.multinomial` drew for the whole batch: on the CPU it samples row r as the argmax of
p_r / q_r, q ~ Exp(1) drawn for all of the batch's rows at once. Sharing a forward pass with other
rows changes only how much left padding a row's attention skips and the matmuls' row count,
which the kernels sum in the same order (tests/test_decoding.py compares every token with
transformers' `generate`; benchmarks/eval_speed.py every answer and score of the real model).
The shared tokens' keys and values, computed in a pass of their own, are the whole prompt's up
to float rounding (6e-8 on the tiny test model's logits); an answer could change only where two
tokens' sampling scores tie that closely, which the benchmark checks on the real model.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any


@functools.cache
def _growing_layer_class() -> type:
    """A transformers cache layer whose keys and values are views of buffers with `headroom`
    columns to spare: a decode step writes its one new column in place. Growing by `torch.cat`
    copied the whole cache at every step: 43% of a side-by-side step of SmolLM2 at 32 rows.
    Made when first asked, so that importing this module does not import transformers."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        def __init__(self, headroom: int) -> None:
            super().__init__()
            self.headroom = headroom

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                self.keys, self.values = key_states[..., :0, :], value_states[..., :0, :]
                self.reserve(key_states.shape[-2])
            length = self.keys.shape[-2]
            end = length + key_states.shape[-2]
            if end > self.buffers[0].shape[-2]:
                self.reserve(end - length)
            for buffer, states in zip(self.buffers, (key_states, value_states), strict=True):
                buffer[..., length:end, :] = states
            self.keys, self.values = (buffer[..., :end, :] for buffer in self.buffers)
            return self.keys, self.values

        def reserve(self, needed: int = 0) -> None:
            """Fresh buffers holding the current keys and values, with room to grow."""
            length = self.keys.shape[-2]
            self.buffers = []
            for tensor in (self.keys, self.values):
                shape = (*tensor.shape[:-2], length + needed + self.headroom, tensor.shape[-1])
                buffer = tensor.new_empty(shape)
                buffer[..., :length, :] = tensor
                self.buffers.append(buffer)
            self.keys, self.values = (buffer[..., :length, :] for buffer in self.buffers)

    return GrowingLayer


@dataclass
class _Batch:
    """One `generate` call's worth of prompts: its generator, its answers so far, and how many
    of them have not ended."""

    generator: Any
    answers: list[list[int]]
    live: int


class _Rows:
    """The rows in flight: their KV cache, attention mask, next positions, last tokens, and the
    (batch, row) each one answers for."""

    def __init__(self) -> None:
        self.cache: Any = None
        self.mask: Any = None
        self.positions: Any = None
        self.last: Any = None
        self.owners: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self.owners)

    def add(self, cache: Any, mask: Any, last: Any, owners: list[tuple[int, int]]) -> None:
        """Rows whose prompts were just prefilled; the shorter side is left-padded (masked)."""
        import torch

        positions = mask.sum(-1)
        if not self.owners:
            self.cache, self.mask, self.positions, self.last = cache, mask, positions, last
            self.owners = owners
            return
        width = max(self.mask.shape[1], mask.shape[1])
        ours, theirs = width - self.mask.shape[1], width - mask.shape[1]
        for layer, other in zip(self.cache.layers, cache.layers, strict=True):
            layer.keys = torch.cat([_left_pad(layer.keys, ours), _left_pad(other.keys, theirs)])
            layer.values = torch.cat(
                [_left_pad(layer.values, ours), _left_pad(other.values, theirs)]
            )
            layer.reserve()
        self.mask = torch.cat([_left_pad(self.mask, ours), _left_pad(mask, theirs)])
        self.positions = torch.cat([self.positions, positions])
        self.last = torch.cat([self.last, last])
        self.owners += owners

    def keep(self, kept: list[int]) -> None:
        """Only the `kept` rows stay; columns that are padding in every one of them go."""
        import torch

        if len(kept) == len(self.owners):
            return
        index = torch.tensor(kept, dtype=torch.long)
        self.owners = [self.owners[i] for i in kept]
        if not kept:
            self.cache = self.mask = self.positions = self.last = None
            return
        self.positions, self.last = self.positions[index], self.last[index]
        self.mask = self.mask[index]
        first = int(self.mask.any(0).nonzero()[0])
        self.mask = self.mask[:, first:]
        for layer in self.cache.layers:
            layer.keys = layer.keys[index, :, first:]
            layer.values = layer.values[index, :, first:]
            layer.reserve()


def _left_pad(tensor: Any, columns: int) -> Any:
    """`columns` zeros before the sequence dimension (the last of a mask, the third of a KV)."""
    import torch

    if not columns:
        return tensor
    shape = list(tensor.shape)
    dim = 1 if tensor.dim() == 2 else 2
    shape[dim] = columns
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


# Batches of mixed tasks share only the chat template's first tokens: not worth a pass of their
# own. A task's system message is hundreds.
MIN_SHARED_PREFIX = 16


def _common_length(a: Any, b: Any) -> int:
    """How many tokens two token sequences start with alike."""
    width = min(len(a), len(b))
    differs = (a[:width] != b[:width]).nonzero()
    return int(differs[0]) if len(differs) else width


def _shared_prefix(input_ids: Any, starts: list[int]) -> int:
    """How many tokens every row of a left-padded batch (its real tokens from `starts`) starts
    with, leaving each row at least its last token (whose logits start its answer)."""
    shortest = input_ids.shape[1] - max(starts) - 1
    first = input_ids[0, starts[0] : starts[0] + shortest]
    for row, start in enumerate(starts[1:], 1):
        shortest = _common_length(first, input_ids[row, start : start + shortest])
        first = first[:shortest]
    return shortest


def _positions(mask: Any) -> Any:
    """Each column's position among its row's unmasked tokens (0 where masked)."""
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)


def _prefill_cache(model: Any, headroom: int) -> Any:
    """A fresh cache of growing layers, one per decoder layer, for a model that caches every
    layer whole; anything else (sliding windows, linear attention) is refused."""
    from transformers import DynamicCache
    from transformers.cache_utils import Cache, DynamicLayer

    plain = DynamicCache(config=model.config)
    if any(type(layer) is not DynamicLayer for layer in plain.layers):
        raise ValueError(
            "side-by-side decoding joins plain KV caches; this model's layers cache "
            f"{sorted({type(layer).__name__ for layer in plain.layers})}"
        )
    growing = _growing_layer_class()
    return Cache(layers=[growing(headroom) for _ in plain.layers])


def _forward(model: Any, input_ids: Any, mask: Any, positions: Any, cache: Any) -> Any:
    """The last position's logits, the cache extended by `input_ids`."""
    import torch

    output = model(
        input_ids=input_ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
    )
    return output.logits[:, -1].to(dtype=torch.float32)


class _Prefixes:
    """The shared tokens of the batches prefilled so far, with their keys and values per layer:
    a task's batches all start with its system message, computed for the first of them only."""

    def __init__(self) -> None:
        self.known: list[tuple[Any, list[tuple[Any, Any]]]] = []

    def longest(self, tokens: Any) -> tuple[int, list[tuple[Any, Any]]]:
        """The most of `tokens`' start that a known prefix holds, and that prefix's layers."""
        best: tuple[int, list[tuple[Any, Any]]] = (0, [])
        for known, layers in self.known:
            common = _common_length(known, tokens)
            if common > best[0]:
                best = (common, layers)
        return best

    def fill(self, model: Any, tokens: Any, cache: Any) -> int:
        """`cache` holding the keys and values of `tokens`' start as far as a known prefix goes
        (it must go MIN_SHARED_PREFIX tokens), else of all of `tokens`, computed and kept; how
        many tokens it holds."""
        import torch

        common, layers = self.longest(tokens)
        if common >= MIN_SHARED_PREFIX:
            for layer, (keys, values) in zip(cache.layers, layers, strict=True):
                layer.update(keys[..., :common, :], values[..., :common, :])
            return common
        _forward(model, tokens[None], None, torch.arange(len(tokens))[None], cache)
        self.known.append((tokens, [(layer.keys, layer.values) for layer in cache.layers]))
        return len(tokens)


def _prefill(
    model: Any, input_ids: Any, mask: Any, cache: Any, prefixes: _Prefixes
) -> tuple[Any, Any]:
    """A left-padded batch's last logits, and its mask as the cache then holds it: the tokens
    every row starts with (a task's system message, most of an extraction prompt) once
    (and once for all the batches that start with them), then each row's own, so that the shared
    tokens come first and a row's padding after them."""
    import torch

    starts = (mask.shape[1] - mask.sum(-1)).tolist()
    # A batch of one row has nothing to share.
    shared = _shared_prefix(input_ids, starts) if len(input_ids) > 1 else 0
    if shared < MIN_SHARED_PREFIX:
        return _forward(model, input_ids, mask, _positions(mask), cache), mask
    shared = prefixes.fill(model, input_ids[0, starts[0] : starts[0] + shared], cache)
    # Each row's own tokens, right-aligned as the prompts are; what was its padding or its copy
    # of the shared tokens is masked.
    own = mask.clone()
    own[torch.arange(len(mask))[:, None], torch.tensor(starts)[:, None] + torch.arange(shared)] = 0
    width = int(own.any(0).long().argmax())
    own = own[:, width:]
    for layer in cache.layers:
        layer.keys = layer.keys.expand(len(input_ids), -1, -1, -1)
        layer.values = layer.values.expand(len(input_ids), -1, -1, -1)
        layer.reserve(own.shape[1])
    joined = torch.cat([own.new_ones(len(own), shared), own], 1)
    positions = _positions(joined)[:, shared:]
    return _forward(model, input_ids[:, width:], joined, positions, cache), joined


def _choose(
    logits: Any, owners: list[tuple[int, int]], config: Any, states: dict[int, _Batch]
) -> Any:
    """One token per row: each batch's rows from its own draws, as `generate` samples them."""
    import torch

    if not config.do_sample:
        return logits.argmax(-1)
    scores = logits / config.temperature if config.temperature != 1.0 else logits
    if config.top_p is not None and config.top_p < 1.0:
        from transformers.generation.logits_process import TopPLogitsWarper

        scores = TopPLogitsWarper(config.top_p)(None, scores)
    probs = torch.softmax(scores, dim=-1)
    tokens = torch.empty(len(owners), dtype=torch.long)
    for number in dict.fromkeys(batch for batch, _ in owners):
        state = states[number]
        mine = [i for i, (batch, _) in enumerate(owners) if batch == number]
        draws = torch.empty(len(state.answers), probs.shape[1])
        draws.exponential_(generator=state.generator)
        rows_of_batch = torch.tensor([owners[i][1] for i in mine])
        tokens[mine] = (probs[mine] / draws[rows_of_batch]).argmax(-1)
    return tokens


def _append_tokens(
    flight: _Rows, states: dict[int, _Batch], ends: Any, max_new_tokens: int
) -> None:
    """Each row's newest token onto its answer; the rows whose answer ended leave the flight."""
    import torch

    kept = []
    ended = torch.isin(flight.last, ends).tolist()
    tokens = flight.last.tolist()
    for i, (token, (batch, row)) in enumerate(zip(tokens, flight.owners, strict=True)):
        answer = states[batch].answers[row]
        answer.append(token)
        if ended[i] or len(answer) == max_new_tokens:
            states[batch].live -= 1
        else:
            kept.append(i)
    flight.keep(kept)


def decode_side_by_side(
    model: Any,
    batches: Iterable[tuple[Any, Any, int]],
    generation_config: Any,
    rows: int,
) -> Iterator[list[list[int]]]:
    """For each (left-padded input ids, attention mask, seed) batch, in order, its answers'
    tokens (each up to and including its end-of-sequence token), as `model.generate` samples
    them after `torch.manual_seed(seed)`; a `torch.Generator` in place of the seed is drawn from
    as `generate` would draw from it (and is left where `generate` would leave it). Up to `rows`
    rows decode together; a batch larger than that decodes alone."""
    import torch

    config = generation_config
    if config.do_sample and (config.top_k or 0) > 0:
        raise ValueError("side-by-side decoding samples with top_k 0, as evaluation does")
    eos = config.eos_token_id if isinstance(config.eos_token_id, list) else [config.eos_token_id]
    ends = torch.tensor(eos)
    pending = iter(batches)
    waiting = next(pending, None)
    states: dict[int, _Batch] = {}
    flight, admitted, handed = _Rows(), 0, 0
    prefixes = _Prefixes()

    with torch.no_grad():
        while waiting is not None or flight:
            while waiting is not None and (not flight or len(flight) + len(waiting[0]) <= rows):
                input_ids, mask, seed = waiting
                generator = seed
                if not isinstance(seed, torch.Generator):
                    generator = torch.Generator().manual_seed(seed)
                states[admitted] = _Batch(generator, [[] for _ in input_ids], len(input_ids))
                cache = _prefill_cache(model, config.max_new_tokens)
                logits, mask = _prefill(model, input_ids, mask, cache, prefixes)
                owners = [(admitted, row) for row in range(len(input_ids))]
                flight.add(cache, mask, _choose(logits, owners, config, states), owners)
                admitted += 1
                waiting = next(pending, None)
            _append_tokens(flight, states, ends, config.max_new_tokens)
            while handed in states and not states[handed].live:
                yield states.pop(handed).answers
                handed += 1
            if flight:
                flight.mask = torch.cat([flight.mask, flight.mask.new_ones(len(flight), 1)], 1)
                logits = _forward(
                    model,
                    flight.last[:, None],
                    flight.mask,
                    flight.positions[:, None],
                    flight.cache,
                )
                flight.positions = flight.positions + 1
                flight.last = _choose(logits, flight.owners, config, states)
