"""The rollout engine: how GRPO rollouts, the periodic held-out eval and the final evaluation
generate.

`plain` is the model's own `generate`: for a PEFT policy a Python wrapper per adapted layer on
every decoded token, and a cache that grows. On an H100 that was 95% of a GRPO step
(../shared/gpu/README.md). `fast` generates from a bare copy of the architecture whose weights
are the policy's own: each adapted layer's base weight (dequantized when the policy is 4-bit:
the values the 4-bit matmul computes with) plus its LoRA delta, summed in float32 and rounded
once to the compute dtype. The copy decodes into a static KV cache, which transformers compiles
on a GPU; elsewhere its decode steps read the KV cache without copying it per query head
(tasks/generation/attention.py).

Same weights, not importance sampling: the copy differs from what the loss computes with only
by that one rounding per weight, the size of the kernel-order noise between a batched decode
and a full-sequence forward, which TRL's own generate path leaves uncorrected too. So the loss
stays TRL's, and the benchmark measures the log-prob gap.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
from types import ModuleType
from typing import Any

from tasks.generation.attention import use_grouped_decode_attention

FAST, PLAIN = "fast", "plain"

# A compiled decode graph is specialised to its cache length; left-padding prompts to a multiple
# of this keeps the lengths few (transformers then reuses the longest cache it has made).
PROMPT_BUCKET = 64


class RolloutError(RuntimeError):
    """A policy the fast engine cannot copy faithfully."""


class RolloutModel:
    """Generates for `policy` with the recipe's engine. `sync()` after the policy's weights change;
    until then generation uses the weights of the last sync. The bare copy is the policy's own,
    kept across RolloutModels (every evaluation call makes one), so a compiled engine finds its
    graphs again; each new RolloutModel folds all of the policy's current weights into it."""

    def __init__(self, policy: Any, engine: str = FAST, *, static_cache: bool | None = None):
        self.policy = policy
        self.fast = engine == FAST
        self.static_cache = self.fast and (
            policy.device.type == "cuda" if static_cache is None else static_cache
        )
        self.source = policy.get_base_model() if hasattr(policy, "get_base_model") else policy
        self.adapted = _adapted_layer_names(self.source) if self.fast else set()
        needs_copy = self.fast and (self.adapted or _is_quantized(self.source))
        self.model = _kept_bare_copy(self.source) if needs_copy else policy
        if self.fast and not self.static_cache:
            # A compiled static-cache graph is left as measured on the GPU (../shared/gpu).
            use_grouped_decode_attention(self.model)
        self.synced_step: int | None = None
        if self.model is not policy:
            # What an optimizer step can change: adapted layers and anything left trainable.
            self.changing = {
                name
                for name, _ in self.model.named_parameters()
                if name.rsplit(".", 1)[0] in self.adapted or _trainable(self.source, name)
            }
            self._copy_weights(everything=True)

    def sync(self, step: int | None = None) -> None:
        """Fold the policy's current weights into the copy (a no-op when it generates itself)."""
        if self.model is not self.policy:
            self._copy_weights(everything=False)
        self.synced_step = step

    def generate(
        self,
        input_ids: Any,
        attention_mask: Any,
        generation_config: Any,
        *,
        width: int = 0,
        rows: int = 0,
    ) -> Any:
        """Prompt + completion ids for left-padded prompts, as the policy's `generate` returns
        them. With a static cache, prompts are first padded to at least `width` columns (rounded
        up to PROMPT_BUCKET) and the batch to at least `rows` rows, so that a run's batches share
        one shape and one compiled graph; what comes back has the caller's shape."""
        import torch

        if not self.fast:
            with torch.no_grad():
                return self.model.generate(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    generation_config=generation_config,
                )
        config = copy.deepcopy(generation_config)
        batch, columns = input_ids.shape
        extra = 0
        if self.static_cache:
            extra = -(-max(width, columns) // PROMPT_BUCKET) * PROMPT_BUCKET - columns
            pad_id = config.pad_token_id if config.pad_token_id is not None else 0
            input_ids = torch.nn.functional.pad(input_ids, (extra, 0), value=pad_id)
            attention_mask = torch.nn.functional.pad(attention_mask, (extra, 0), value=0)
            if rows > batch:  # repeats of the last prompt, dropped below
                filler = [-1] * (rows - batch)
                input_ids = torch.cat([input_ids, input_ids[filler]])
                attention_mask = torch.cat([attention_mask, attention_mask[filler]])
            config.cache_implementation = "static"
            # TRL turns compilation off for its own generate; the static cache is here for it.
            config.disable_compile = False
        with torch.no_grad():
            sequences = self.model.generate(
                input_ids=input_ids, attention_mask=attention_mask, generation_config=config
            )
        return sequences[:batch, extra:]

    def decodes_side_by_side(self, generation_config: Any) -> bool:
        """Whether a rollout can go through evaluation's decoder (tasks/generation/decoding.py): on
        a CPU, with the fast engine, sampling with what that decoder applies (temperature, top-p)
        and nothing it does not."""
        config = generation_config
        return (
            self.fast
            and not self.static_cache
            and self.model.device.type == "cpu"
            and config.do_sample
            and (config.top_k or 0) == 0
            and not config.min_p
            and config.repetition_penalty in (None, 1.0)
        )

    def sample_side_by_side(
        self, input_ids: Any, attention_mask: Any, generation_config: Any
    ) -> list[list[int]]:
        """The answers `generate` would sample for this batch, each up to and including its end
        of turn, from the draws the global random state makes (and leaves it where `generate`
        would): the KV cache written in place, rows that end leaving the pass, the tokens every
        row starts with computed once. 1.2x as fast as `generate` for a GRPO step of SmolLM2 on a
        CPU (benchmarks/pipeline_stages.py)."""
        import torch

        from tasks.generation.decoding import decode_side_by_side

        draws = torch.Generator()
        draws.set_state(torch.get_rng_state())
        [answers] = decode_side_by_side(
            self.model, [(input_ids, attention_mask, draws)], generation_config, len(input_ids)
        )
        torch.set_rng_state(draws.get_state())
        return answers

    def _copy_weights(self, *, everything: bool) -> None:
        import torch

        with torch.no_grad():
            for name, target in self.model.named_parameters():
                if everything or name in self.changing:
                    module_name, attribute = name.rsplit(".", 1)
                    target.copy_(_source_tensor(self.source, module_name, attribute))


def _adapted_layer_names(model: Any) -> set[str]:
    from peft.tuners.lora import LoraLayer

    names = set()
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            if any(module.use_dora.get(a) for a in module.active_adapters):
                raise RolloutError(f"{name}: DoRA adapters are not folded by the fast engine")
            names.add(name)
    return names


def _is_quantized(model: Any) -> bool:
    return getattr(model, "hf_quantizer", None) is not None or any(
        type(p).__name__ in ("Params4bit", "Int8Params") for p in model.parameters()
    )


def _trainable(model: Any, name: str) -> bool:
    try:
        return model.get_parameter(name).requires_grad
    except AttributeError:
        return False  # the policy holds it under an adapter's base layer


# Where a model keeps its bare copy: in its own __dict__, out of its submodules (so out of its
# state_dict, `.to()` and the optimizer), and read from there alone, since PEFT's __getattr__
# would otherwise hand a wrapper the copy of the model it wraps.
_KEPT_COPY = "_tucano_rollout_copy"


def _kept_bare_copy(source: Any) -> Any:
    """`source`'s bare copy, made once per model and placement: a new copy is a new compiled
    graph on a GPU (tens of seconds), a reused one costs a weight copy."""
    embeddings = source.get_input_embeddings().weight
    placement = (embeddings.device, embeddings.dtype, tuple(embeddings.shape))
    kept = vars(source).get(_KEPT_COPY)
    if kept is None or kept[0] != placement:
        kept = vars(source)[_KEPT_COPY] = (placement, _bare_copy(source))
    model = kept[1]
    model.generation_config = copy.deepcopy(source.generation_config)
    return model


def _bare_copy(source: Any) -> Any:
    """The same architecture in the compute dtype, unquantized, without adapters, on the same
    device; its weights are filled in by the first sync."""
    import torch

    config = copy.deepcopy(source.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    embeddings = source.get_input_embeddings().weight
    device = embeddings.device
    # Random init draws from the generators rollouts sample with: a run's samples would then
    # depend on the engine. The weights are overwritten anyway.
    cuda = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda), torch.device(device):
        model = _pristine_class(type(source))._from_config(config, dtype=embeddings.dtype)
    model.eval()
    model.requires_grad_(False)
    return model


def _pristine_class(model_class: type) -> type:
    """`model_class` as transformers defines it. Unsloth rewrites the architecture's classes in
    place for its own inference path (which wants its own attributes and cache); the copy needs
    transformers' forward, the one the static cache and compilation are built for, so it comes
    from a fresh execution of the modeling module, left out of sys.modules."""
    return getattr(_pristine_module(model_class.__module__), model_class.__name__)


@functools.cache
def _pristine_module(name: str) -> ModuleType:
    """Executed once per process: torch.compile guards on the forward's code object, so every
    fresh execution would make every copy compile again."""
    spec = importlib.util.find_spec(name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _source_tensor(source: Any, module_name: str, attribute: str) -> Any:
    from peft.tuners.lora import LoraLayer
    from peft.utils.integrations import dequantize_module_weight

    module = source.get_submodule(module_name)
    if not isinstance(module, LoraLayer):
        if attribute == "weight":
            return dequantize_module_weight(module)
        return getattr(module, attribute)
    base = module.get_base_layer()
    if attribute != "weight":
        return getattr(base, attribute)
    weight = dequantize_module_weight(base).float()
    if not module.merged:
        for adapter in module.active_adapters:
            if adapter in module.lora_A:
                weight = weight + module.get_delta_weight(adapter).float()
    return weight


def completions_until_eos(completion_ids: Any, eos_token_ids: list[int]) -> list[list[int]]:
    """Each row's tokens up to and including its first end-of-sequence token."""
    rows = []
    for row in completion_ids.tolist():
        ends = [i for i, token in enumerate(row) if token in eos_token_ids]
        rows.append(row[: ends[0] + 1] if ends else row)
    return rows


class FastRollouts:
    """Mixed into a GRPOTrainer class: its text generation goes through a `RolloutModel` that is
    synced whenever the optimizer has stepped since the last rollout. The rest is TRL's."""

    _rollout: RolloutModel | None = None
    # The longest prompt of the run, in tokens: every rollout batch is padded to it.
    rollout_prompt_width: int = 0

    def _generate_single_turn(
        self,
        prompt_ids: list[list[int]],
        images: Any,
        multimodal_fields: dict[str, Any],
        num_generations: int,
        has_tool_images: bool = False,
    ) -> tuple[list[list[int]], None]:
        import torch
        from trl.extras.profiling import profiling_context
        from trl.trainer.utils import pad

        if images is not None or multimodal_fields:
            raise RolloutError("the rollout engine generates text only; prompts carry images")
        if self._rollout is None:
            self._rollout = RolloutModel(self.accelerator.unwrap_model(self.model), FAST)
        if self._rollout.synced_step != self.state.global_step:
            with profiling_context(self, "rollout.sync"):
                self._rollout.sync(self.state.global_step)
        # Left-padded as TRL's own generate path pads them.
        prompts = [torch.tensor(ids) for ids in prompt_ids]
        input_ids = pad(prompts, padding_value=self._tokenizer.pad_token_id, padding_side="left")
        attention_mask = pad([torch.ones_like(t) for t in prompts], padding_side="left")
        width = input_ids.shape[1]
        device = self.accelerator.device
        with profiling_context(self, "rollout.generate"):
            if self._rollout.decodes_side_by_side(self.generation_config):
                return self._rollout.sample_side_by_side(
                    input_ids, attention_mask, self.generation_config
                ), None
            sequences = self._rollout.generate(
                input_ids.to(device),
                attention_mask.to(device),
                self.generation_config,
                width=self.rollout_prompt_width,
            )
        return completions_until_eos(sequences[:, width:], self.eos_token_ids), None


def with_engine(trainer_class: type, engine: str, prompt_width: int) -> type:
    """`trainer_class` generating through the fast engine, or unchanged for the plain one. Made
    when asked, not at import: Unsloth replaces TRL's trainer class when it is imported."""
    if engine == PLAIN:
        return trainer_class
    return type(
        f"FastRollout{trainer_class.__name__}",
        (FastRollouts, trainer_class),
        {"rollout_prompt_width": prompt_width},
    )
