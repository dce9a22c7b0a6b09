"""Where a GRPO step's time goes, and what a resume costs.

Prints one table for the chosen profile: seconds per step split into generation, reward scoring
and the policy update (log-prob forward/backward and the optimizer; the optimizer step alone
beside it), steps per second, and the time from process-level start to the first step for a
fresh run and for a run resuming from a checkpoint in the store, measured side by side.

Usage: .venv/bin/python benchmarks/train_step.py [--profile cpu] [--steps 8]
(the GPU profile is the GPU issue's; it needs a CUDA machine)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

PROFILES = {"cpu": "cpu_tiny.yaml"}


class Timers:
    """Wraps the callables that make up a step and sums their time per training step."""

    def __init__(self) -> None:
        self.spent: dict[str, list[float]] = defaultdict(list)
        self.current: dict[str, float] = defaultdict(float)
        self.first_step_at: float | None = None
        self.step_started = 0.0

    def wrap(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.current[label] += time.perf_counter() - started

        setattr(owner, name, timed)

    def begin_step(self) -> None:
        self.step_started = time.perf_counter()

    def end_step(self) -> None:
        now = time.perf_counter()
        if self.first_step_at is None:
            self.first_step_at = now
        step = now - self.step_started
        self.spent["step"].append(step)
        for label in ("generation", "rewards", "optimizer"):
            self.spent[label].append(self.current.get(label, 0.0))
        # Everything else in the step: log-prob forward and backward passes, the optimizer.
        self.spent["update"].append(step - self.current["generation"] - self.current["rewards"])
        self.current.clear()


def run(profile: str, steps: int) -> None:
    import torch
    from transformers import TrainerCallback
    from transformers.generation.utils import GenerationMixin

    import tasks.training.train
    from configs.recipe import CONFIG_DIR, load_recipe
    from tasks.core.store import ArtifactStore
    from tasks.prep.build import prepare_data
    from tasks.prep.olist import fingerprint_source
    from tasks.training.model import prepare_base_model

    recipe = load_recipe(CONFIG_DIR / PROFILES[profile])
    half = steps // 2
    training = recipe.training.model_copy(
        update={"max_steps": steps, "save_steps": half, "heldout_prompts": 0}
    )
    timers = Timers()
    timers.wrap(GenerationMixin, "generate", "generation")
    timers.wrap(torch.optim.AdamW, "step", "optimizer")
    original_rewards = tasks.training.train.reward_functions

    def timed_rewards(*args: Any, **kwargs: Any) -> list:
        return [_timed_function(fn, timers) for fn in original_rewards(*args, **kwargs)]

    tasks.training.train.reward_functions = timed_rewards

    class StepClock(TrainerCallback):
        stop_at: int | None = None

        def on_step_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            timers.begin_step()

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            timers.end_step()
            if self.stop_at is not None and state.global_step >= self.stop_at:
                control.should_training_stop = True  # a crash right after this checkpoint

    clock = StepClock()
    _install_callback(clock)
    with tempfile.TemporaryDirectory() as tmp:
        store = ArtifactStore(tmp)
        data_root = Path(__file__).resolve().parents[1] / "data" / "olist"
        data = prepare_data(fingerprint_source(str(data_root)), recipe.data, store)
        base = prepare_base_model(recipe.model, data, store)

        # 1. A fresh run, stopped right after its mid-run checkpoint.
        clock.stop_at = half
        started = time.perf_counter()
        tasks.training.train.train_seed(training, recipe.lora, data, base, 0, store)
        fresh_to_first = timers.first_step_at - started
        # 2. The same run started again: it resumes from that checkpoint.
        timers.first_step_at, clock.stop_at = None, None
        started = time.perf_counter()
        tasks.training.train.train_seed(training, recipe.lora, data, base, 0, store)
        resume_to_first = timers.first_step_at - started

    # Means, so that the parts add up to the step; the first step (one-off set-up) is left out.
    mean = {label: statistics.fmean(values[1:]) for label, values in timers.spent.items()}
    print(f"\nGRPO step, profile {profile} ({recipe.name}), {steps} steps, means after the first\n")
    print("| measure | value |")
    print("|---|---:|")
    print(f"| seconds per step | {mean['step']:.3f} |")
    print(f"| steps per second | {1 / mean['step']:.2f} |")
    for label in ("generation", "rewards", "update", "optimizer"):
        print(f"| {label} (s) | {mean[label]:.4f} ({100 * mean[label] / mean['step']:.1f}%) |")
    print(f"| fresh start to first step (s) | {fresh_to_first:.2f} |")
    print(f"| restart to first new step, resuming (s) | {resume_to_first:.2f} |")
    print(f"| resume overhead (s) | {resume_to_first - fresh_to_first:+.2f} |")


def _timed_function(fn: Any, timers: Timers) -> Any:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            timers.current["rewards"] += time.perf_counter() - started

    timed.__name__, timed.task = fn.__name__, fn.task
    return timed


def _install_callback(callback: Any) -> None:
    """Adds the step clock to every GRPOTrainer the benchmark creates."""
    from trl import GRPOTrainer

    original = GRPOTrainer.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs["callbacks"] = [*kwargs.get("callbacks", []), callback]
        original(self, *args, **kwargs)

    GRPOTrainer.__init__ = init


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="cpu")
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    run(args.profile, args.steps)


if __name__ == "__main__":
    main()
