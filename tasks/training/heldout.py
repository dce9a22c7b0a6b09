"""The periodic held-out eval: its own temperature, and the same random draws at every step.

GRPO samples rollouts hot to explore, but evaluation and `tucano analyze` answer at 0.1. Chosen by
a held-out reward at the rollout temperature, an adapter that loops at 0.1 until the token limit
looked like the best one (a quarter of SQL answers cut, CHANGELOG.md). Only the
sampling changes: the log-probs, entropy and loss stay at the rollout temperature.

Every held-out eval of a run draws the same random numbers, as the final evaluation gives the
start model and the tuned one the same draws: an answer then differs from the start's only where
the model changed. With fresh draws each time, the same model's held-out reward moved by more
than the gains an adapter was chosen by (CHANGELOG.md, "The runs behind the training code"). The
draws come from a generator of their own, so an eval leaves training's random stream as it was:
how often the run evaluates does not change what it trains.
"""

from __future__ import annotations

import copy
from typing import Any


class HeldoutSampling:
    """Mixed into a GRPOTrainer class: `evaluate` generates at `heldout_temperature` (none: the
    rollouts') from the random state `heldout_seed` sets, then training's generation settings
    and random state are back."""

    heldout_temperature: float | None
    heldout_seed: int

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        import torch

        rollout_config, rollout_kwargs = self.generation_config, self.generation_kwargs
        if self.heldout_temperature is not None:
            self.generation_config = copy.deepcopy(rollout_config)
            self.generation_config.temperature = self.heldout_temperature
            # TRL's plain generate path applies these over the model's own generation config.
            self.generation_kwargs = {**rollout_kwargs, "temperature": self.heldout_temperature}
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        try:
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(self.heldout_seed)
                return super().evaluate(*args, **kwargs)
        finally:
            self.generation_config, self.generation_kwargs = rollout_config, rollout_kwargs


def with_heldout_sampling(trainer_class: type, temperature: float | None, seed: int) -> type:
    """`trainer_class` whose held-out eval samples at `temperature` from the draws `seed` fixes."""
    return type(
        f"HeldoutSampling{trainer_class.__name__}",
        (HeldoutSampling, trainer_class),
        {"heldout_temperature": temperature, "heldout_seed": seed},
    )
