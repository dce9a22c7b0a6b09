"""Decode-step attention that reads the KV cache where it lies.

transformers' SDPA attention hands grouped-query attention to the kernel as is only without a mask;
a batch of left-padded prompts has one, so every decode step first copies each layer's keys and
values once per query head that shares them. SmolLM2-135M shares each of its 3 KV heads among 3
query heads: on the 2-core CPU the copy was 38% of a decode step at 8 rows and 500 cached tokens
(torch profiler, `aten::copy_` of [8, 3, 3, L, 64] twice per layer), more than the matmuls.

PyTorch's CPU flash kernel takes grouped heads itself (`enable_gqa`) and, at one new token per
row, gives the same values bit for bit as on the copies (tests/test_rollout.py), in 130 ms a step
instead of 235 (8 extraction prompts of SmolLM2, one contended thread). Folding a group's query
heads into one head's queries was faster still (100 ms) but not bit-identical (differences of
3e-7): evaluation's answers would no longer be the ones it gave before. Longer queries (prefill,
training's forward) keep transformers' path.
"""

from __future__ import annotations

from typing import Any

GROUPED_SDPA = "tucano_grouped_sdpa"


def grouped_sdpa_forward(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    grouped = getattr(module, "num_key_value_groups", 1) > 1
    if query.shape[2] != 1 or not grouped or dropout or kwargs.get("position_bias") is not None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
    output = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, scale=scaling, enable_gqa=True
    )
    return output.transpose(1, 2).contiguous(), None


def use_grouped_decode_attention(model: Any) -> None:
    """`model` decodes with `grouped_sdpa_forward` where it used transformers' SDPA attention."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if model.config._attn_implementation not in ("sdpa", GROUPED_SDPA):
        return
    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa_forward)
    AttentionMaskInterface.register(GROUPED_SDPA, sdpa_mask)
    model.set_attn_implementation(GROUPED_SDPA)
