"""Training on a CPU in float32 and under bfloat16 autocast (`cpu_bf16`), side by side in one run.

The real model of `cpu_smol` (SmolLM2-135M-Instruct, LoRA) through the project's own `train_sft`
and `train_seed`: `--steps` SFT steps of the recipe's batch, then `--steps` GRPO steps of the
recipe's `training` section from the raw model in both precisions, so that the answers (cut at the
limit) are as long in both (its tasks, samples and completion length, no held-out eval), once
per precision and `--repeats` times, alternating; the fastest of each is kept. Each repeat is a
run of its own (its own SFT seed or GRPO seed, so nothing comes from the cache). The table gives
seconds a step (the trainer's own runtime over its steps), the ratio, and the first step's loss
in each precision, which should be close.

Usage: .venv/bin/python benchmarks/cpu_bf16.py [--steps 4] [--repeats 1] [--store DIR]
Needs a CPU with avx512_bf16 (bfloat16 autocast elsewhere is emulated, and slower).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from train_step import ROOT

PRECISIONS = {"float32": False, "bfloat16 autocast": True}


def _per_step(history: list[dict]) -> tuple[float, float]:
    """Seconds a step and the first logged loss, from a trainer's log history."""
    runtime = next(entry["train_runtime"] for entry in history if "train_runtime" in entry)
    steps = max(entry["step"] for entry in history)
    loss = next(entry["loss"] for entry in history if "loss" in entry)
    return runtime / steps, loss


def run(steps: int, repeats: int, store_dir: Path) -> None:
    import torch

    from configs.recipe import CONFIG_DIR, load_recipe
    from tasks.core.store import ArtifactStore
    from tasks.models.model import prepare_base_model
    from tasks.prep.build import prepare_data
    from tasks.prep.olist import fingerprint_source
    from tasks.training.sft import train_sft
    from tasks.training.train import train_seed

    if not torch.cpu._is_avx512_bf16_supported():
        raise SystemExit("this CPU has no avx512_bf16: bfloat16 autocast would be emulated")
    recipe = load_recipe(CONFIG_DIR / "cpu_smol.yaml")
    store = ArtifactStore(store_dir)
    data = prepare_data(fingerprint_source(str(ROOT / "data" / "olist")), recipe.data, store)
    base = prepare_base_model(recipe.model, data, store)
    best: dict[tuple[str, str], tuple[float, float]] = {}
    for repeat in range(repeats):
        for name, cpu_bf16 in PRECISIONS.items():
            sized = {"max_steps": steps, "save_steps": steps, "cpu_bf16": cpu_bf16}
            sft = recipe.sft.model_copy(update={**sized, "seed": 1000 + repeat})
            model = train_sft(sft, recipe.lora, data, base, store)
            sft_history = store.read_json(f"{Path(model.location).parent}/log_history.json")
            training = recipe.training.model_copy(update={**sized, "heldout_prompts": 0})
            adapter = train_seed(training, recipe.lora, data, base, 1000 + repeat, store)
            for stage, history in (
                ("SFT", sft_history),
                ("GRPO", store.read_json(adapter.log_history)),
            ):
                seconds, loss = _per_step(history)
                if (stage, name) not in best or seconds < best[(stage, name)][0]:
                    best[(stage, name)] = (seconds, loss)
    print(f"\n{steps} steps a run, best of {repeats}, {torch.get_num_threads()} threads\n")
    print("| stage | float32 s/step | bfloat16 autocast s/step | ratio | first loss, fp32 / bf16 |")
    print("|---|---:|---:|---:|---|")
    for stage in ("SFT", "GRPO"):
        (fp32, loss32), (bf16, loss16) = (best[(stage, name)] for name in PRECISIONS)
        losses = f"{loss32:.4f} / {loss16:.4f}"
        print(f"| {stage} | {fp32:.1f} | {bf16:.1f} | {fp32 / bf16:.2f}x | {losses} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--store", type=Path, help="keeps the converted model between runs")
    args = parser.parse_args()
    if args.store:
        run(args.steps, args.repeats, args.store)
        return
    with tempfile.TemporaryDirectory(prefix="tucano-bf16-") as tmp:
        run(args.steps, args.repeats, Path(tmp))


if __name__ == "__main__":
    main()
