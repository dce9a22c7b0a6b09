"""How fast are the rewards, and how much of a GRPO step do they take?

Prints three tables:
1. completions scored per second per task, on one core, uncached, SQL executed against the
   shipped Olist database (the audit set's 104 completions, repeated);
2. the rewards' share of a real GRPO training step on the CPU tiny profile (reward functions
   timed inside TRL's step, side by side with TRL's own step_time);
3. the reward audit, as a run's process does it once, with no statement's result kept and with
   the sandbox's kept results, side by side (CPU seconds, medians).

Usage: .venv/bin/python benchmarks/reward_throughput.py [--seconds 3] [--steps 6] [--audits 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from configs.recipe import CONFIG_DIR, load_recipe
from rewards import TASKS, score, sql_sandbox
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
            sql_sandbox.forget_results()  # uncached: each pass runs its statements again
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


def audit_seconds(audits: int) -> list[tuple[int, float]]:
    """CPU seconds of one reward audit from nothing kept, by how many results the sandbox keeps
    (0: every statement runs), the two taking turns."""
    from configs.recipe import AuditConfig
    from tasks.evaluation.audit import audit_rewards

    database, kept = str(shipped_database()), sql_sandbox.KEPT_RESULTS
    spent: dict[int, list[float]] = {0: [], kept: []}
    try:
        for _ in range(audits):
            for size in spent:
                sql_sandbox.KEPT_RESULTS = size
                sql_sandbox.forget_results()
                started = time.process_time()
                audit_rewards(AuditConfig(), database)
                spent[size].append(time.process_time() - started)
    finally:
        sql_sandbox.KEPT_RESULTS = kept
    return [(size, statistics.median(seconds)) for size, seconds in spent.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per task, table 1")
    parser.add_argument("--steps", type=int, default=6, help="GRPO steps, table 2")
    parser.add_argument("--audits", type=int, default=5, help="audits of each kind, table 3")
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

    (_, plain), (kept, memo) = audit_seconds(args.audits)
    print(f"\n3. One reward audit, CPU seconds ({args.audits} each, medians)\n")
    print("| results kept | audit (s) | against none kept |")
    print("|---:|---:|---:|")
    print(f"| 0 | {plain:.2f} | 1.00 |")
    print(f"| {kept} | {memo:.2f} | {memo / plain:.2f} |")


if __name__ == "__main__":
    main()
