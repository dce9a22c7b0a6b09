"""How fast are the rewards, and how much of a GRPO step do they take?

Prints two tables:
1. completions scored per second per task, on one core, uncached, SQL executed against the
   shipped Olist database (the audit set's 104 completions, repeated);
2. the rewards' share of a real GRPO training step on the CPU tiny profile (reward functions
   timed inside TRL's step, side by side with TRL's own step_time).

Usage: .venv/bin/python benchmarks/reward_throughput.py [--seconds 3] [--steps 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from configs.recipe import CONFIG_DIR, load_recipe
from rewards import TASKS, score
from tasks.evaluation.audit import load_audit_set
from tasks.evaluation.score_logs import shipped_database


def scoring_throughput(seconds: float) -> list[tuple[str, int, float]]:
    database = str(shipped_database())
    rows = load_audit_set()
    results = []
    for task in TASKS:
        items = [row for row in rows if row["task"] == task]
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            for row in items:
                score(task, row["completion"], database=database, **row["context"])
            done += len(items)
        results.append((task, done, time.perf_counter() - started))
    return results


def reward_share(steps: int) -> tuple[list[float], list[float]]:
    """Per-step wall time (TRL's step_time) and time spent inside the reward functions."""
    import tasks.training.train
    from tasks.core.store import ArtifactStore
    from tasks.models.model import prepare_base_model
    from tasks.prep.build import prepare_data
    from tasks.prep.olist import fingerprint_source

    recipe = load_recipe(CONFIG_DIR / "cpu_tiny.yaml")
    training = recipe.training.model_copy(update={"max_steps": steps, "save_steps": steps})
    spent: list[float] = []
    original = tasks.training.train.reward_functions

    def timed_reward_functions(*args, **kwargs):
        functions = original(*args, **kwargs)

        def wrap(fn):
            def timed(*a, **k):
                started = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    spent.append(time.perf_counter() - started)

            timed.__name__, timed.task = fn.__name__, fn.task
            return timed

        return [wrap(fn) for fn in functions]

    tasks.training.train.reward_functions = timed_reward_functions
    with tempfile.TemporaryDirectory() as tmp:
        store = ArtifactStore(tmp)
        data = prepare_data(
            fingerprint_source(str(Path(__file__).resolve().parents[1] / "data" / "olist")),
            recipe.data,
            store,
        )
        base = prepare_base_model(recipe.model, data, store)
        adapter = tasks.training.train.train_seed(training, recipe.lora, data, base, 0, store)
        history = store.read_json(adapter.log_history)
    step_times = [entry["step_time"] for entry in history if "step_time" in entry]
    per_step = len(spent) / max(1, len(step_times))
    rewards = [sum(spent[i : i + int(per_step)]) for i in range(0, len(spent), int(per_step))]
    return step_times, rewards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per task, table 1")
    parser.add_argument("--steps", type=int, default=6, help="GRPO steps, table 2")
    args = parser.parse_args()
    # One core, as the tables say; torch is imported later, so this still takes effect.
    os.environ["OMP_NUM_THREADS"] = "1"

    print("\n1. Scoring throughput (one core, uncached, SQL executed)\n")
    print(f"| {'task':<10} | {'completions':>11} | {'seconds':>7} | {'completions/s':>13} |")
    print(f"|{'-' * 12}|{'-' * 13}:|{'-' * 9}:|{'-' * 15}:|")
    for task, done, elapsed in scoring_throughput(args.seconds):
        print(f"| {task:<10} | {done:>11} | {elapsed:>7.2f} | {done / elapsed:>13.0f} |")

    step_times, rewards = reward_share(args.steps)
    # The first step includes one-off start-up (compiling, allocating); the median is robust.
    step, reward = statistics.median(step_times), statistics.median(rewards)
    print(f"\n2. Rewards inside a GRPO step (cpu_tiny, {args.steps} steps, medians)\n")
    print("| step time (s) | reward time (s) | reward share |")
    print("|---:|---:|---:|")
    print(f"| {step:.3f} | {reward:.4f} | {100 * reward / step:.2f}% |")


if __name__ == "__main__":
    main()
