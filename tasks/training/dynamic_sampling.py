"""Dynamic sampling (DAPO; verl, NeMo RL and OpenRLHF have it, TRL does not).

A prompt group whose completions all get the same reward has zero advantage: it costs a full
generation and teaches nothing (V1 of the reports had frac_reward_zero_std = 1.0 on every step).
This trainer drops such groups after scoring and refills the batch with groups generated for new
prompts, up to `max_refills` extra generation rounds; if the batch is still short it is topped up
with dropped groups, which keep the batch shape and add no gradient. The refill prompts come from
a seeded stream over the train set whose position is saved in every checkpoint, so a resumed run
draws the same prompts as an uninterrupted one. Its base, which every GRPO run of the project
uses, logs the share of groups that tie by the same test, and shuffles each epoch's prompts as a
function of the epoch, so that a run resumed past its first epoch takes them in an uninterrupted
run's order.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.trainer.utils import RepeatSampler

from tasks.training.checkpoint_callbacks import checkpoint_dir
from tasks.training.prompt_order import stratified_stream

STATE_FILE = "dynamic_sampling.json"
# Advantages of a zero-variance group are zero up to the rounding of a mean of equal floats.
ZERO_ADVANTAGE = 1e-6
# Per-completion tensors padded on the left (prompts) and on the right (completions).
LEFT_PADDED = {"prompt_ids", "prompt_mask"}
RIGHT_PADDED = {
    "completion_ids",
    "completion_mask",
    "old_per_token_logps",
    "ref_per_token_logps",
    "sampling_per_token_logps",
    "importance_sampling_ratio",
    "tool_mask",
}


def informative_groups(advantages: torch.Tensor, group_size: int) -> torch.Tensor:
    return advantages.view(-1, group_size).abs().amax(dim=1) > ZERO_ADVANTAGE


def select_groups(batch: dict[str, Any], groups: torch.Tensor, group_size: int) -> dict[str, Any]:
    """The rows of the given groups, for every per-completion tensor of the batch."""
    # On a GPU the groups come from the advantages, on the GPU: the offsets must be made there.
    offsets = torch.arange(group_size, device=groups.device)
    rows = (groups.unsqueeze(1) * group_size + offsets).flatten()
    return {
        key: value[rows.to(value.device)]
        if isinstance(value, torch.Tensor) and value.dim() >= 1
        else value
        for key, value in batch.items()
    }


def concat_batches(batches: list[dict[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """Stack batches whose sequences were padded to different lengths."""
    merged: dict[str, Any] = {}
    for key, first in batches[0].items():
        if not (isinstance(first, torch.Tensor) and first.dim() >= 1):
            continue
        parts = [batch[key] for batch in batches]
        if key in LEFT_PADDED | RIGHT_PADDED and first.dim() == 2:
            width = max(part.shape[1] for part in parts)
            fill = pad_token_id if key.endswith("_ids") else 0
            parts = [_pad(part, width, fill, left=key in LEFT_PADDED) for part in parts]
        merged[key] = torch.cat(parts)
    # What the loss divides by: the completion tokens of the batch actually trained on.
    merged["num_items_in_batch"] = merged["completion_mask"].sum()
    return merged


def _pad(tensor: torch.Tensor, width: int, fill: float, left: bool) -> torch.Tensor:
    missing = width - tensor.shape[1]
    if missing == 0:
        return tensor
    padding = torch.full((tensor.shape[0], missing), fill, dtype=tensor.dtype, device=tensor.device)
    return torch.cat([padding, tensor] if left else [tensor, padding], dim=1)


class PromptStream:
    """An endless, seeded walk over the train rows, one shuffled pass after another (or the
    recipe's stratified stream); restored to its saved position when the run resumes from a
    checkpoint."""

    def __init__(
        self,
        rows: list[dict[str, Any]],
        seed: int,
        resume: Path | None,
        *,
        stratified: bool = False,
        stated_share: float | None = None,
        task_shares: dict[str, float] | None = None,
    ):
        saved = resume / STATE_FILE if resume else None
        self.position = json.loads(saved.read_text())["position"] if saved and saved.exists() else 0
        self.rows, self.seed = rows, seed
        self.stratified, self.stated_share = stratified, stated_share
        self.task_shares = task_shares
        # A stratified stream's first n prompts are a prefix of any longer one: dealt once and
        # extended by doubling, not dealt again (reading every review) at each refill.
        self._dealt: list[dict[str, Any]] = []

    def take(self, count: int) -> list[dict[str, Any]]:
        if self.stratified:
            end = self.position + count
            if len(self._dealt) < end:
                self._dealt = stratified_stream(
                    self.rows,
                    f"{self.seed}/refills",
                    max(end, 2 * len(self._dealt)),
                    self.stated_share,
                    self.task_shares,
                )
            taken = self._dealt[self.position : end]
            self.position = end
            return taken
        taken = []
        for _ in range(count):
            epoch, index = divmod(self.position, len(self.rows))
            order = list(range(len(self.rows)))
            random.Random(self.seed * 100_003 + epoch).shuffle(order)
            taken.append(self.rows[order[index]])
            self.position += 1
        return taken


class SaveStreamPosition(TrainerCallback):
    """Writes the prompt stream's position into each checkpoint (before it is uploaded)."""

    def __init__(self, stream: PromptStream):
        self.stream = stream

    def on_save(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        (checkpoint_dir(args, state) / STATE_FILE).write_text(
            json.dumps({"position": self.stream.position})
        )


class EpochSeededSampler(RepeatSampler):
    """TRL's sampler, its shuffle a function of the epoch. TRL seeds its generator once and draws
    a permutation at each epoch's start, so a run resumed past its first epoch drew the first
    epoch's order again, and from its first step on trained on other prompts than the run it
    resumed. The trainer calls `set_epoch` at each epoch's start: the generator is put where an
    uninterrupted run's is then, so the orders are the same, epoch for epoch. The call reaches
    the sampler through accelerate's wrappers in one process, as the project trains (a process a
    seed); a run spread over several processes and resumed in the middle of a later pass would
    not get it (accelerate's skip wrapper around its shard wrapper passes it on to neither)."""

    def set_epoch(self, epoch: int) -> None:
        if self.shuffle:
            self.generator.manual_seed(self.seed)
            for _ in range(epoch):
                torch.randperm(self.num_samples, generator=self.generator)


class GroupTiesGRPOTrainer(GRPOTrainer):
    """TRL's trainer, its `frac_reward_zero_std` the share of prompt groups whose completions
    all tie, its train prompts shuffled by `EpochSeededSampler`. TRL measures the ties so only
    where it scales rewards by group (or not at all): under GDPO (normalize_then_sum) or batch
    scaling it tests the whole batch's reward spread, so it read 0 however many groups tied and
    taught nothing."""

    def _get_train_sampler(self, dataset: Any = None) -> EpochSeededSampler:
        sampler = super()._get_train_sampler(dataset)
        return EpochSeededSampler(
            data_source=sampler.data_source,
            mini_repeat_count=sampler.mini_repeat_count,
            batch_size=sampler.batch_size,
            repeat_count=sampler.repeat_count,
            shuffle=sampler.shuffle,
            seed=sampler.seed,
        )

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        batch = super()._generate_and_score_completions(inputs)
        if self.model.training:
            useful = informative_groups(batch["advantages"], self.num_generations)
            self._metrics["train"]["frac_reward_zero_std"][-1] = 1.0 - useful.float().mean().item()
        return batch


class DynamicSamplingGRPOTrainer(GroupTiesGRPOTrainer):
    def __init__(self, *args: Any, prompt_stream: PromptStream, max_refills: int, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.prompt_stream, self.max_refills = prompt_stream, max_refills

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        batch = super()._generate_and_score_completions(inputs)
        if not self.model.training:
            return batch
        size = self.num_generations
        needed = len(inputs) // size
        useful = informative_groups(batch["advantages"], size)
        kept = [select_groups(batch, useful.nonzero().squeeze(1), size)]
        have, refills = int(useful.sum()), 0
        while have < needed and refills < self.max_refills:
            prompts = self.prompt_stream.take(needed)
            more = super()._generate_and_score_completions(
                [row for row in prompts for _ in range(size)]
            )
            more_useful = informative_groups(more["advantages"], size)
            kept.append(select_groups(more, more_useful.nonzero().squeeze(1), size))
            have, refills = have + int(more_useful.sum()), refills + 1
        if have < needed:  # still short: zero-advantage groups keep the shape, add no gradient
            kept.append(select_groups(batch, (~useful).nonzero().squeeze(1)[: needed - have], size))
        merged = concat_batches(kept, self.processing_class.pad_token_id)
        merged = select_groups(merged, torch.arange(needed), size)
        merged["num_items_in_batch"] = merged["completion_mask"].sum()
        self._metrics["train"]["dynamic_sampling/refills"].append(float(refills))
        self._metrics["train"]["dynamic_sampling/informative_frac"].append(
            min(have, needed) / needed
        )
        return merged
