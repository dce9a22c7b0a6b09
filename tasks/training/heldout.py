"""The periodic held-out eval samples at its own temperature.

GRPO samples rollouts hot to explore, but evaluation and `tucano analyze` answer at 0.1. Chosen by
a held-out reward at the rollout temperature, an adapter that loops at 0.1 until the token limit
looked like the best one (a quarter of SQL answers cut, docs/measurements.md). Only the
sampling changes: the log-probs, entropy and loss stay at the rollout temperature.
"""

from __future__ import annotations

import copy
from typing import Any


class HeldoutSampling:
    """Mixed into a GRPOTrainer class: `evaluate` generates at `heldout_temperature`, then
    training's generation settings are back."""

    heldout_temperature: float

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        rollout_config, rollout_kwargs = self.generation_config, self.generation_kwargs
        self.generation_config = copy.deepcopy(rollout_config)
        self.generation_config.temperature = self.heldout_temperature
        # TRL's plain generate path applies these over the model's own generation config.
        self.generation_kwargs = {**rollout_kwargs, "temperature": self.heldout_temperature}
        try:
            return super().evaluate(*args, **kwargs)
        finally:
            self.generation_config, self.generation_kwargs = rollout_config, rollout_kwargs


def with_heldout_temperature(trainer_class: type, temperature: float | None) -> type:
    """`trainer_class` whose held-out eval samples at `temperature`; unchanged for None."""
    if temperature is None:
        return trainer_class
    return type(
        f"HeldoutSampling{trainer_class.__name__}",
        (HeldoutSampling, trainer_class),
        {"heldout_temperature": temperature},
    )
