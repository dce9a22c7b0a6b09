"""Where a run's time goes: the whole pipeline per recipe, stage by stage, side by side.

Each recipe runs `tucano pipeline` from an empty store of its own, one after the other (never two
at once: they would share the cores), with a temporary Prefect server; the run records how long
each stage took (`pipeline/latest.json`: data prep, the audit, base model and SFT, GRPO,
evaluation, the report). The table gives each stage's seconds and share of the run for every
recipe, and each recipe's time against the first one's.

    .venv/bin/python benchmarks/pipeline_stages.py --recipe configs/cpu_smol.yaml \\
        [--recipe another.yaml] [--data data/olist] [--keep DIR]

`--units` instead times, in one process and side by side, a recipe's units before its speed-ups
(BEFORE: each extraction field described in the system message, a step's update in one pass,
activations recomputed in the backward pass, rollouts through transformers' `generate`) and as it
is: a quarter of SFT's batches (drawn at random and batched by length, side by side), a GRPO
step's update and its rollouts, on the recipe's base model and prompts; minutes, not a run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tasks.core.progress import duration  # noqa: E402


def run_pipeline(recipe: str, data: str, store: Path) -> dict[str, Any]:
    """One whole run from an empty store: its stage times and the wall time of the command."""
    home = Path(tempfile.mkdtemp(prefix="tucano-bench-prefect-"))
    env = {**os.environ, "PREFECT_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("PREFECT_API_URL", None)
    command = [
        str(ROOT / ".venv" / "bin" / "tucano"), "pipeline",
        "--recipe", recipe, "--artifacts", str(store), "--data", data,
    ]  # fmt: skip
    started = time.monotonic()
    subprocess.run(command, cwd=ROOT, env=env, check=True)
    wall = time.monotonic() - started
    shutil.rmtree(home, ignore_errors=True)
    record = json.loads((store / "pipeline" / "latest.json").read_text())
    return {"wall": wall, "stages": dict(record["stage_seconds"])}


def stage_table(names: list[str], runs: list[dict[str, Any]]) -> str:
    stages = list(dict.fromkeys(stage for run in runs for stage in run["stages"]))
    head = "| stage | " + " | ".join(f"{name} | share" for name in names) + " |"
    rule = "|---|" + "---:|---:|" * len(names)
    lines = [head, rule]
    for stage in [*stages, "the whole command"]:
        cells = []
        for run in runs:
            seconds = run["wall"] if stage == "the whole command" else run["stages"].get(stage)
            total = sum(run["stages"].values())
            share = (
                "" if stage == "the whole command" or seconds is None else f"{seconds / total:.0%}"
            )
            cells.append(f"{'-' if seconds is None else duration(seconds)} | {share}")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    ratios = ", ".join(
        f"{name}: {run['wall'] / runs[0]['wall']:.2f}x of {names[0]}"
        for name, run in zip(names[1:], runs[1:], strict=True)
    )
    return "\n".join(lines) + (f"\n\n{ratios}" if ratios else "")


# What a stage was before this recipe's speed-ups: each field's earlier value.
BEFORE = {
    "data": {"extraction_instructions": "described"},
    "sft": {"gradient_checkpointing": True},
    "training": {"update_rows": None, "gradient_checkpointing": True},
}
# SFT is timed on every fourth of its batches, in each order: a quarter of the stage, with the
# order's own mix of lengths.
SFT_STRIDE = 4
# Rollouts of a GRPO step decode this many tokens (a SmolLM2 extraction answer after SFT is
# 105-127): the raw model would run to the token limit.
ROLLOUT_TOKENS = 110


def _variant(recipe: Any, changes: dict[str, dict[str, Any]]) -> Any:
    return recipe.model_copy(
        update={
            section: getattr(recipe, section).model_copy(update=fields)
            for section, fields in changes.items()
        }
    )


def _units(recipe: Any, store: Path, data: str, before: bool) -> dict[str, float]:
    """Seconds of the units the stages are made of: one GRPO update and one step's rollouts, on
    the recipe's base model and prompts."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from tasks.core.store import ArtifactStore
    from tasks.generation.rollout import FAST, RolloutModel
    from tasks.models.model import prepare_base_model
    from tasks.prep.build import prepare_data
    from tasks.prep.olist import fingerprint_source

    artifacts = ArtifactStore(store)
    prepared = prepare_data(fingerprint_source(data), recipe.data, artifacts)
    base = prepare_base_model(recipe.model, prepared, artifacts)
    folder = str(artifacts.path(base.location))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    training = recipe.training
    every_row = artifacts.read_jsonl(prepared.train)
    rows = [r for r in every_row if r["task"] in training.tasks]
    prompts = [
        tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
        for row in rows[: training.prompts_per_step]
    ]
    answers = [row["reference"] + tokenizer.eos_token for row in rows[: training.prompts_per_step]]
    step_rows = training.prompts_per_step * training.num_generations
    whole = tokenizer(
        [p + a for p, a in zip(prompts, answers, strict=True)] * training.num_generations,
        return_tensors="pt",
        padding=True,
    )
    completion = max(len(tokenizer(a)["input_ids"]) for a in answers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-7)

    def update(passes: int, checkpointing: bool) -> float:
        if checkpointing:
            model.gradient_checkpointing_enable()
        started = time.perf_counter()
        for chunk in torch.arange(step_rows).chunk(passes):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=training.cpu_bf16):
                out = model(
                    input_ids=whole["input_ids"][chunk],
                    attention_mask=whole["attention_mask"][chunk],
                    logits_to_keep=completion,
                )
            out.logits.float().log_softmax(-1).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        model.gradient_checkpointing_disable()
        return time.perf_counter() - started

    model.train()
    measured = _sft_batches(recipe, every_row, model, tokenizer)
    passes = step_rows // (training.update_rows or step_rows)
    update(passes, training.gradient_checkpointing)  # warm-up
    measured["tokens of a step's prompt and answer"] = float(
        whole["attention_mask"].sum(1).float().mean()
    )
    measured["GRPO update of a step (s)"] = update(passes, training.gradient_checkpointing)
    model.eval()
    config = GenerationConfig(
        max_new_tokens=ROLLOUT_TOKENS, min_new_tokens=ROLLOUT_TOKENS, do_sample=True,
        temperature=training.temperature, top_p=training.top_p, top_k=0,
        eos_token_id=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    encoded = tokenizer(prompts * training.num_generations, return_tensors="pt", padding=True)
    rollout = RolloutModel(model, FAST)
    torch.manual_seed(0)
    started = time.perf_counter()
    if before:
        rollout.generate(encoded["input_ids"], encoded["attention_mask"], config)
    else:
        rollout.sample_side_by_side(encoded["input_ids"], encoded["attention_mask"], config)
    measured[f"rollouts of a step, {ROLLOUT_TOKENS} tokens each (s)"] = (
        time.perf_counter() - started
    )
    return measured


def _sft_batches(recipe: Any, rows: list[dict[str, Any]], model: Any, tokenizer: Any) -> dict:
    """SFT's tokens (padding included) and the seconds of every `SFT_STRIDE`-th of its batches,
    the recipe's examples drawn at random (as the trainer does) and batched by length
    (`sft.batches_by_length`), side by side on one model."""
    import random

    import torch

    from tasks.training.sft import (
        batched_by_length,
        conversations,
        example_lengths,
        mixed_rows,
        sft_examples,
    )

    sft = recipe.sft
    size = sft.max_steps * sft.batch_size
    if sft.task_mix is not None:
        rows = mixed_rows(rows, sft.task_mix, size, sft.seed, sft.balance_issues)
    examples = sft_examples(rows)
    lengths = example_lengths(examples, tokenizer)
    at_random = random.Random(sft.seed).sample(examples, len(examples))
    orders = {
        "at random": at_random,
        "by length": batched_by_length(examples, lengths, sft.batch_size, sft.seed),
    }
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-7)
    if sft.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "right"
    measured = {"SFT tokens of the examples": float(sum(lengths))}
    for name, ordered in orders.items():
        whole = conversations(ordered)
        step = sft.batch_size
        encoded = [
            tokenizer.apply_chat_template(whole[at : at + step], tokenize=True,
                                          return_dict=True, padding=True, return_tensors="pt")
            for at in range(0, len(whole), step)
        ]  # fmt: skip
        started = time.perf_counter()
        for batch in encoded[::SFT_STRIDE]:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=sft.cpu_bf16):
                out = model(**batch, labels=batch["input_ids"])
            out.loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        measured[f"SFT, every {SFT_STRIDE}th of its {len(encoded)} batches {name} (s)"] = (
            time.perf_counter() - started
        )
        measured[f"SFT tokens computed, batches {name}"] = float(
            sum(batch["input_ids"].numel() for batch in encoded)
        )
    tokenizer.padding_side = padding_side
    model.gradient_checkpointing_disable()
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", action="append", required=True)
    parser.add_argument("--data", default=str(ROOT / "data" / "olist"))
    parser.add_argument("--keep", help="keep each run's store in this folder")
    parser.add_argument("--units", action="store_true", help="time the units, not whole runs")
    args = parser.parse_args()
    names = [Path(recipe).stem for recipe in args.recipe]
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="tucano-bench-"))
    if args.units:
        from configs.recipe import load_recipe

        for path, name in zip(args.recipe, names, strict=True):
            recipe = load_recipe(path)
            before = _units(_variant(recipe, BEFORE), root / f"{name}-before", args.data, True)
            after = _units(recipe, root / name, args.data, False)
            print(
                f"\n{name}: before its speed-ups (each extraction field described, one update "
                "pass, activations recomputed, transformers' generate) and as it is\n"
            )
            print("| unit | before | after | ratio |")
            print("|---|---:|---:|---:|")
            for key in before:
                ratio = before[key] / after[key]
                print(f"| {key} | {before[key]:.1f} | {after[key]:.1f} | {ratio:.2f}x |")
        return
    runs = [
        run_pipeline(recipe, args.data, root / name)
        for recipe, name in zip(args.recipe, names, strict=True)
    ]
    print(stage_table(names, runs))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
