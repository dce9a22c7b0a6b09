"""What each evaluation call costs when one process evaluates again and again (issue 21).

The five calls, in this order, each through the project's own `generate` on a model with a LoRA
adapter (what the fast engine copies): the first call on a set of prompts; the same prompts again;
another set; both sets in one call; the first set on a second model object loaded like the
first. Only the `generate` call is timed, not the loading. With a compiled engine a call that
compiles again shows here as tens of seconds instead of a steady-state call; "graphs" counts
the graphs torch.compile built during the call (run with TORCH_LOGS=recompiles to see why).

Profiles:
  cpu: the `cpu_tiny` recipe's tiny model: nothing compiles on a CPU, so this only shows that
       the script runs.
  gpu: the V4.2 shape (`l4_v42`: batches of 16 prompts x up to 512 tokens) with the
       Qwen2.5-0.5B architecture built from config (random weights, so every completion runs to
       512 tokens) and the real Qwen2.5 tokenizer, bf16. Needs a CUDA GPU.

Usage: .venv/bin/python benchmarks/eval_calls.py [--profile cpu|gpu] [--prompts 16]
       [--tokenizer DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from train_step import ROOT, _synchronize, random_qwen25

RECIPES = {"cpu": "cpu_tiny.yaml", "gpu": "l4_v42.yaml"}


def run(profile: str, prompts: int, tokenizer_dir: Path) -> None:
    import torch

    from configs.recipe import CONFIG_DIR, load_recipe
    from tasks.core.store import ArtifactStore
    from tasks.models.model import prepare_base_model
    from tasks.prep.build import prepare_data
    from tasks.prep.olist import fingerprint_source

    recipe = load_recipe(CONFIG_DIR / RECIPES[profile])
    if profile == "gpu" and not torch.cuda.is_available():
        sys.exit("eval_calls.py --profile gpu: this machine has no CUDA GPU")
    with tempfile.TemporaryDirectory(prefix="tucano-bench-") as tmp:
        store = ArtifactStore(Path(tmp) / "store")
        data = prepare_data(fingerprint_source(str(ROOT / "data" / "olist")), recipe.data, store)
        if profile == "gpu":
            base = random_qwen25(Path(tmp) / "qwen2.5-0.5b-random", tokenizer_dir)
        else:
            base = prepare_base_model(recipe.model, data, store)
        eval_prompts = [row["prompt"] for row in store.read_jsonl(data.eval)]
        if len(eval_prompts) < 2 * prompts:
            sys.exit(
                f"eval_calls.py: {RECIPES[profile]} has {len(eval_prompts)} eval prompts, "
                f"two sets of --prompts {prompts} need {2 * prompts}"
            )
        first, other = eval_prompts[:prompts], eval_prompts[prompts : 2 * prompts]
        config = recipe.evaluation.model_copy(update={"batch_size": prompts})
        model, tokenizer = adapted_model(recipe, base, store)
        calls = [
            ("first call", model, first),
            ("same prompts again", model, first),
            ("other prompts", model, other),
            ("both sets in one call", model, first + other),
        ]
        rows = [timed(name, *call, tokenizer, config) for name, *call in calls]
        second, _ = adapted_model(recipe, base, store)
        rows.append(timed("a second model object", second, first, tokenizer, config))
    device = torch.cuda.get_device_name() if profile == "gpu" else "CPU"
    print(
        f"\nEvaluation calls, profile {profile} ({recipe.name}) on {device}: batches of "
        f"{prompts} prompts, up to {config.max_new_tokens} new tokens, "
        f"{config.rollout_engine} engine.\n"
    )
    print("| call | prompts | seconds | graphs |")
    print("|---|---:|---:|---:|")
    for name, count, seconds, graphs in rows:
        print(f"| {name} | {count} | {seconds:.2f} | {graphs} |")


def adapted_model(recipe: Any, base: Any, store: Any) -> tuple[Any, Any]:
    """The base model with the recipe's LoRA adapter, as evaluation runs a trained seed. The
    adapter is freshly initialised (its delta is zero): the fast engine copies it all the same."""
    from peft import get_peft_model

    from tasks.models.backends import peft_lora_config
    from tasks.models.model import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(base, store)
    return get_peft_model(model, peft_lora_config(recipe.lora)), tokenizer


def timed(name: str, model: Any, prompts: list, tokenizer: Any, config: Any) -> tuple:
    from torch._dynamo.utils import counters

    from tasks.evaluation.evaluate import generate

    graphs = counters["stats"]["unique_graphs"]
    _synchronize()
    started = time.perf_counter()
    generate(model, tokenizer, prompts, config)
    _synchronize()
    seconds = time.perf_counter() - started
    print(f"-- {name}: {seconds:.2f} s", flush=True)
    return name, len(prompts), seconds, counters["stats"]["unique_graphs"] - graphs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(RECIPES), default="cpu")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per set (one batch)")
    parser.add_argument(
        "--tokenizer", type=Path, default=ROOT.parent / "shared/data/tokenizers/qwen2.5"
    )
    args = parser.parse_args()
    run(args.profile, args.prompts, args.tokenizer)


if __name__ == "__main__":
    main()
