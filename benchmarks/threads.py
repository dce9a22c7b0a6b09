"""The same work as one process of all the cores' threads and as processes of one thread each.

The work: `--jobs` evaluations of `--prompts` eval prompts of each task by the recipe's base
model, each as `evaluate_model` answers them (`eval_speed.answer`), every job the same prompts.
"one process": the jobs one after another in a process with a thread per core; then the jobs in
processes of one thread each (as a recipe's `processes` runs its seeds and evaluations,
flows/side_by_side.py): as many processes as cores, each doing its share of the jobs in turn, and
one process a job, all at once (more processes than cores: the kernel shares the cores out). The
table gives each way's wall time for all the jobs, the work per second against one process's,
and how many answers came out as one process's (thread counts sum floating point in another
order, so a few may not).

Usage: .venv/bin/python benchmarks/threads.py [--recipe cpu_smol.yaml] [--prompts 8] [--jobs 4]
       [--store DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from eval_speed import answer
from train_step import ROOT


def job(recipe_file: str, prompts: int, store_dir: Path, count: int) -> list[dict]:
    """`count` evaluations one after another in this process: seconds and answers of each."""
    from configs.recipe import CONFIG_DIR, load_recipe
    from tasks.core.store import ArtifactStore
    from tasks.models.model import prepare_base_model
    from tasks.prep.build import prepare_data
    from tasks.prep.olist import fingerprint_source

    recipe = load_recipe(CONFIG_DIR / recipe_file)
    store = ArtifactStore(store_dir)
    data = prepare_data(fingerprint_source(str(ROOT / "data" / "olist")), recipe.data, store)
    base = prepare_base_model(recipe.model, data, store)
    taken: dict[str, int] = defaultdict(int)
    rows = []
    for row in store.read_jsonl(data.eval):
        if taken[row["task"]] < prompts:
            taken[row["task"]] += 1
            rows.append(row)
    database = str(data.local_database(store))
    return [answer(recipe.evaluation, base, store, rows, database) for _ in range(count)]


def in_processes(args: argparse.Namespace, threads: int, processes: int, count: int) -> dict:
    """`processes` children of `threads` threads each, all at once, each doing `count` jobs."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    command = [
        sys.executable, __file__, "--child", str(count), "--recipe", args.recipe,
        "--prompts", str(args.prompts), "--store", str(args.store),
    ]  # fmt: skip
    started = time.perf_counter()
    children = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    results = [json.loads(child.communicate()[0].splitlines()[-1]) for child in children]
    if any(child.returncode for child in children):
        raise SystemExit("a child failed")
    answers = [run["answers"] for result in results for run in result]
    return {"seconds": time.perf_counter() - started, "answers": answers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="cpu_smol.yaml")
    parser.add_argument("--prompts", type=int, default=8, help="eval prompts of each task")
    parser.add_argument("--jobs", type=int, default=4, help="a multiple of the cores")
    parser.add_argument("--store", type=Path, help="artifact store to keep the model in")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        runs = job(args.recipe, args.prompts, args.store, args.child)
        print(json.dumps(runs))
        return
    cores = os.cpu_count() or 1
    ways = {f"one process, {cores} threads": (cores, 1), f"{cores} processes, 1 thread": (1, cores)}
    ways[f"{args.jobs} processes, 1 thread"] = (1, args.jobs)
    with contextlib.ExitStack() as stack:
        args.store = args.store or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        job(args.recipe, args.prompts, args.store, 0)  # the data and the model, made once
        runs = {
            name: in_processes(args, threads, processes, args.jobs // processes)
            for name, (threads, processes) in ways.items()
        }
    one = next(iter(runs.values()))
    prompts = len(one["answers"][0])
    total = prompts * args.jobs
    print(
        f"\n{args.jobs} evaluations of {prompts} eval prompts ({args.prompts} a task) by "
        f"{args.recipe}'s base model, {cores} cores\n"
    )
    print("| way | wall | prompts a second | work a second, x one process | same answers |")
    print("|---|---:|---:|---:|---:|")
    for name, run in runs.items():
        same = sum(
            a["completion"] == b["completion"]
            for x, y in zip(one["answers"], run["answers"], strict=True)
            for a, b in zip(x, y, strict=True)
        )
        print(
            f"| {name} | {run['seconds']:.1f} s | {total / run['seconds']:.2f} | "
            f"{one['seconds'] / run['seconds']:.2f}x | {same} of {total} |"
        )


if __name__ == "__main__":
    main()
