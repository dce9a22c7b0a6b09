"""Where a GRPO step's time goes, per backend and rollout engine, against the hardware's floor.

Each variant (backend x rollout engine) runs in a process of its own, side by side in one run, on
the same data and model: a few real GRPO steps of the profile's recipe through the project's own
`train_seed`, then one batch of evaluation generation through the project's own `generate`. The
table gives seconds per step split into generation, reward scoring and the update (log-prob
forward, backward, optimizer), generated tokens per second, peak memory, evaluation time, each
variant's ratio to plain TRL + PEFT, and the floor: the bytes each decode step must read (weights
and KV cache) at the bandwidth measured here, and the update's matrix FLOPs at the matrix rate
measured here.

Profiles:
  cpu: the `cpu_tiny` recipe and its tiny model; also what a resume from a checkpoint costs.
  gpu: the V4.2 shape (`l4_v42`: 2 prompts x 16 generations x 512 tokens) with the Qwen2.5-0.5B
       architecture built from config (random weights, so completions run to full length) and
       the real Qwen2.5 tokenizer. Needs a CUDA GPU; Unsloth variants need the gpu extra.

Usage: .venv/bin/python benchmarks/train_step.py [--profile cpu|gpu] [--steps 3]
       [--variants a,b] [--tokenizer DIR] [--eval-prompts 16]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULT = "RESULT "


@dataclass(frozen=True)
class Variant:
    key: str
    name: str
    backend: str
    engine: str
    load_in_4bit: bool = False
    # Evaluation loads through transformers whatever trained: its cost depends on the engine
    # and precision alone, so the GPU profile times it once per engine (bf16).
    evaluate: bool = True


# The first variant of each profile is the reference the ratios are to.
PROFILES: dict[str, tuple[str, list[Variant]]] = {
    "cpu": (
        "cpu_tiny.yaml",
        [
            Variant("peft-plain", "TRL + PEFT LoRA, plain generate", "peft", "plain"),
            Variant("peft-fast", "TRL + PEFT LoRA, fast engine", "peft", "fast"),
        ],
    ),
    "gpu": (
        "l4_v42.yaml",
        [
            Variant("peft-plain", "TRL + PEFT LoRA bf16, plain generate", "peft", "plain"),
            Variant(
                "unsloth-fast", "Unsloth NF4 + LoRA, fast engine", "unsloth", "fast", True, False
            ),
            Variant(
                "unsloth-plain",
                "Unsloth NF4 + LoRA, plain generate",
                "unsloth",
                "plain",
                True,
                False,
            ),
            Variant("peft-fast", "TRL + PEFT LoRA bf16, fast engine", "peft", "fast"),
        ],
    ),
}

# Qwen2.5-0.5B's config.json (the architecture of Tucano2-qwen-0.5B, the V4.2 base model).
QWEN25_05B = {
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "vocab_size": 151936,
}


# -- the parent: data, model, hardware rates, one process per variant, the table ---------------


def run(
    profile: str, steps: int, names: list[str] | None, tokenizer: Path, eval_prompts: int
) -> None:
    import torch

    from configs.recipe import CONFIG_DIR, load_recipe
    from tasks.core.store import ArtifactStore
    from tasks.models.model import prepare_base_model
    from tasks.prep.build import prepare_data
    from tasks.prep.olist import fingerprint_source

    recipe_file, variants = PROFILES[profile]
    if names:
        variants = [v for i, v in enumerate(variants) if v.key in names or i == 0]
    recipe = load_recipe(CONFIG_DIR / recipe_file)
    on_gpu = profile == "gpu"
    if on_gpu and not torch.cuda.is_available():
        sys.exit("train_step.py --profile gpu: this machine has no CUDA GPU")
    rates = hardware_rates(on_gpu)
    with tempfile.TemporaryDirectory(prefix="tucano-bench-") as tmp:
        store = ArtifactStore(Path(tmp) / "store")
        data = prepare_data(fingerprint_source(str(ROOT / "data" / "olist")), recipe.data, store)
        if on_gpu:
            base = random_qwen25(Path(tmp) / "qwen2.5-0.5b-random", tokenizer)
        else:
            base = prepare_base_model(recipe.model, data, store)
        shape = model_shape(base, store)
        results = []
        for variant in variants:
            workdir = Path(tmp) / f"variant-{len(results)}"
            shutil.copytree(store.root, workdir / "store")
            job = {
                "profile": profile, "variant": asdict(variant), "steps": steps,
                "store": str(workdir / "store"), "data": data.model_dump(),
                "base": {**base.model_dump(), "load_in_4bit": variant.load_in_4bit},
                "eval_prompts": eval_prompts,
            }  # fmt: skip
            print(f"-- {time.strftime('%H:%M:%S')} {variant.name}", flush=True)
            results.append(run_variant(job))
            print(RESULT + json.dumps(results[-1]), flush=True)
    print_table(profile, recipe, steps, variants, results, shape, rates)
    if profile == "cpu":
        resume_cost(recipe, steps=8)


def random_qwen25(folder: Path, tokenizer_dir: Path) -> Any:
    """The Qwen2.5-0.5B architecture with random weights and the real tokenizer, as a local
    pretrained model folder."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from tasks.core.manifests import BaseModelArtifact

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = Qwen2Config(
        **QWEN25_05B,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return BaseModelArtifact(
        fingerprint="qwen2.5-0.5b-random", source="pretrained", location=str(folder), in_store=False
    )


def model_shape(base: Any, store: Any) -> dict[str, int]:
    from transformers import AutoConfig

    from tasks.models.model import model_path

    config = AutoConfig.from_pretrained(model_path(base, store))
    head_dim = config.hidden_size // config.num_attention_heads
    embed = config.vocab_size * config.hidden_size
    per_layer = (
        config.hidden_size * (config.hidden_size + 2 * config.num_key_value_heads * head_dim)
        + config.hidden_size * config.hidden_size
        + 3 * config.hidden_size * config.intermediate_size
    )
    lm_head = 0 if config.tie_word_embeddings else embed
    return {
        # Weights a token's forward pass multiplies by (the output head included, the embedding
        # lookup not): what each decode step reads and each trained token costs in FLOPs.
        "matmul_params": config.num_hidden_layers * per_layer + (lm_head or embed),
        "kv_values_per_token": 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim,
    }


def hardware_rates(on_gpu: bool) -> dict[str, float]:
    """Memory bandwidth (bytes read + written per second by a large copy) and the dense matrix
    rate (FLOP/s of a large product) of this machine, in the dtype the models run in."""
    import torch

    device, dtype, n = ("cuda", torch.bfloat16, 8192) if on_gpu else ("cpu", torch.float32, 1024)
    source = torch.empty(256 * 2**20 if on_gpu else 32 * 2**20, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)

    def timed(fn: Any, repeats: int) -> float:
        fn()
        if on_gpu:
            torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(repeats):
            fn()
        if on_gpu:
            torch.cuda.synchronize()
        return (time.perf_counter() - started) / repeats

    copy_s = timed(lambda: target.copy_(source), 20)
    matmul_s = timed(lambda: a @ b, 10)
    return {
        "bandwidth": 2 * source.numel() / copy_s,
        "matmul": 2 * n**3 / matmul_s,
        "dtype_bytes": 2 if on_gpu else 4,
    }


def run_variant(job: dict[str, Any]) -> dict[str, Any]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(job)],
        env=env, cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    lines = [line for line in process.stdout.splitlines() if line.startswith(RESULT)]
    if process.returncode or not lines:
        print(process.stdout[-4000:], process.stderr[-8000:], sep="\n")
        return {"error": f"exit {process.returncode}"}
    return json.loads(lines[-1][len(RESULT) :])


def floors(result: dict[str, Any], shape: dict[str, int], rates: dict[str, float]) -> dict:
    """The least time the step's work can take here: each decode step reads every weight once
    and the batch's KV cache so far; the update multiplies every weight by every trained token
    forward (2 FLOPs) and backward to the inputs (2 FLOPs; LoRA's own gradients are negligible)."""
    batch, decode_steps = result["sequences"], result["max_completion"]
    prompt = result["prompt_tokens"] / batch
    weight_bytes = shape["matmul_params"] * rates["dtype_bytes"]
    kv_bytes = shape["kv_values_per_token"] * rates["dtype_bytes"]
    cache_reads = batch * kv_bytes * (decode_steps * prompt + decode_steps**2 / 2)
    generation = (decode_steps * weight_bytes + cache_reads) / rates["bandwidth"]
    tokens = result["prompt_tokens"] + result["completion_tokens"]
    update = 4 * shape["matmul_params"] * tokens / rates["matmul"]
    return {"generation": generation, "update": update, "step": generation + update}


def print_table(profile, recipe, steps, variants, results, shape, rates) -> None:
    import torch

    device = torch.cuda.get_device_name() if profile == "gpu" else "CPU"
    print(f"\nGRPO step, profile {profile} ({recipe.name}) on {device}: {steps} steps per variant,")
    print("means of the steps after the first; eval = one batch of evaluation generation.\n")
    reference = results[0] if "error" not in results[0] else None
    print(
        "| variant | s/step | generation s | rewards s | update s | gen tok/s | peak GiB "
        "| eval s | eval 1st call s | eval vs plain | step vs plain | step / floor |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for variant, result in zip(variants, results, strict=True):
        if "error" in result:
            print(f"| {variant.name} | {result['error']} |" + " |" * 11)
            continue
        floor = floors(result, shape, rates)
        step_ratio = f"{reference['step'] / result['step']:.1f}x" if reference else "-"
        evaluation = "| - | - | - "
        if "eval_s" in result:
            ratio = f"{reference['eval_s'] / result['eval_s']:.1f}x" if reference else "-"
            evaluation = f"| {result['eval_s']:.2f} | {result['eval_first_s']:.2f} | {ratio} "
        print(
            f"| {variant.name} | {result['step']:.2f} | {result['generation']:.2f} "
            f"| {result['rewards']:.3f} | {result['update']:.2f} | {result['tokens_per_s']:.0f} "
            f"| {result['peak_gib']:.2f} {evaluation}| {step_ratio} "
            f"| {result['step'] / floor['step']:.0f}x |"
        )
    sample = next((r for r in results if "error" not in r), None)
    if sample:
        floor = floors(sample, shape, rates)
        print(
            f"\nFloor: generation {floor['generation']:.3f} s + update {floor['update']:.3f} s "
            f"= {floor['step']:.3f} s per step, from {shape['matmul_params'] / 1e6:.0f}M matmul "
            f"weights, {sample['sequences']} sequences x {sample['max_completion']:.0f} decode "
            f"steps, {sample['prompt_tokens'] + sample['completion_tokens']:.0f} tokens trained; "
            "measured "
            f"here: {rates['bandwidth'] / 1e12:.2f} TB/s copy bandwidth, "
            f"{rates['matmul'] / 1e12:.2f} TFLOP/s matrix rate."
        )
    for variant, result in zip(variants, results, strict=True):
        if variant.engine == "fast" and not result.get("engine_used", True):
            print(f"WARNING {variant.name}: rollouts did not go through the fast engine")
        if "logp_gap" in result:
            print(
                f"{variant.name}: rollout vs training log-probs of the sampled tokens, mean "
                f"|difference| {result['logp_gap']:.4f} nats"
            )


# -- a worker: one variant's steps and evaluation, in a fresh process --------------------------


class Timers:
    """Sums, per training step, the time spent inside wrapped callables (a nested call to the
    same label is counted once)."""

    def __init__(self) -> None:
        self.spent: dict[str, list[float]] = defaultdict(list)
        self.current: dict[str, float] = defaultdict(float)
        self.depth: dict[str, int] = defaultdict(int)
        self.first_step_at: float | None = None
        self.step_started = 0.0

    def timed(self, fn: Any, label: str) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.depth[label] += 1
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth[label] -= 1
                if not self.depth[label]:
                    _synchronize()
                    self.current[label] += time.perf_counter() - started

        for attribute in ("__name__", "task"):
            if hasattr(fn, attribute):
                setattr(wrapper, attribute, getattr(fn, attribute))
        return wrapper

    def begin_step(self) -> None:
        _synchronize()
        self.step_started = time.perf_counter()

    def end_step(self) -> None:
        _synchronize()
        now = time.perf_counter()
        if self.first_step_at is None:
            self.first_step_at = now
        step = now - self.step_started
        self.spent["step"].append(step)
        for label in ("generation", "rewards"):
            self.spent[label].append(self.current.get(label, 0.0))
        self.spent["update"].append(step - self.current["generation"] - self.current["rewards"])
        self.current.clear()


def _synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def instrument(timers: Timers, stop_at: list[int | None]) -> list[Any]:
    """Times every GRPOTrainer's generation and rewards, and clocks its steps; the trainers
    built are appended to the list returned."""
    from transformers import TrainerCallback

    import tasks.training.train

    original_rewards = tasks.training.train.reward_functions

    def timed_rewards(*args: Any, **kwargs: Any) -> list:
        return [timers.timed(fn, "rewards") for fn in original_rewards(*args, **kwargs)]

    tasks.training.train.reward_functions = timed_rewards

    class StepClock(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            timers.begin_step()

        def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
            timers.end_step()
            if stop_at[0] is not None and state.global_step >= stop_at[0]:
                control.should_training_stop = True  # a crash right after this checkpoint

    original_build = tasks.training.train.build_trainer
    built: list[Any] = []

    def build(*args: Any, **kwargs: Any) -> Any:
        run = original_build(*args, **kwargs)
        built.append(run.trainer)
        trainer = run.trainer
        trainer.add_callback(StepClock())
        # Per trainer, not per class: Unsloth swaps TRL's trainer class for its own.
        trainer._generate_single_turn = timers.timed(trainer._generate_single_turn, "generation")
        return run

    tasks.training.train.build_trainer = build
    return built


def worker(job: dict[str, Any]) -> None:
    import torch

    from configs.recipe import CONFIG_DIR, load_recipe
    from tasks.core.manifests import BaseModelArtifact, PreparedData
    from tasks.core.store import ArtifactStore

    variant = Variant(**job["variant"])
    if variant.backend == "unsloth":
        import unsloth  # noqa: F401  (first, as build_trainer does)
    import tasks.training.train

    recipe = load_recipe(CONFIG_DIR / PROFILES[job["profile"]][0])
    steps = job["steps"]
    training = recipe.training.model_copy(
        update={
            "max_steps": steps, "save_steps": steps, "heldout_prompts": 0,
            "backend": variant.backend, "rollout_engine": variant.engine,
        }
    )  # fmt: skip
    store = ArtifactStore(job["store"])
    data, base = PreparedData(**job["data"]), BaseModelArtifact(**job["base"])
    timers = Timers()
    trainers = instrument(timers, [None])
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    adapter = tasks.training.train.train_seed(training, recipe.lora, data, base, 0, store)
    peak = torch.cuda.max_memory_allocated() if torch.cuda.is_available() else _peak_rss()
    history = [e for e in store.read_json(adapter.log_history) if "completions/mean_length" in e]
    later = history[1:] or history
    sequences = training.prompts_per_step * training.num_generations
    completion = statistics.fmean(e["completions/mean_length"] for e in later) * sequences
    tokens = [b["num_tokens"] - a["num_tokens"] for a, b in itertools.pairwise(history)]
    mean = {label: statistics.fmean(v[1:] or v) for label, v in timers.spent.items()}
    evaluation = (
        eval_seconds(recipe, variant, data, base, adapter, store, job["eval_prompts"])
        if variant.evaluate
        else {}
    )
    result = {
        **{label: mean[label] for label in ("step", "generation", "rewards", "update")},
        "tokens_per_s": completion / mean["generation"],
        "peak_gib": peak / 2**30,
        "sequences": sequences,
        "max_completion": max(e["completions/max_length"] for e in later),
        "completion_tokens": completion,
        "prompt_tokens": (statistics.fmean(tokens) if tokens else 0) - completion,
        # Unsloth swaps TRL's trainer class: say whether rollouts really went through the engine.
        "engine_used": getattr(trainers[-1], "_rollout", None) is not None,
        **evaluation,
    }
    print(RESULT + json.dumps(result), flush=True)


def _peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def eval_seconds(recipe, variant, data, base, adapter, store, prompts: int) -> dict:
    """One batch of evaluation generation as `evaluate_model` loads and runs it; the fast engine
    twice, since its first call compiles."""
    from tasks.evaluation.evaluate import generate, load_with_adapter

    config = recipe.evaluation.model_copy(
        update={"rollout_engine": variant.engine, "batch_size": prompts}
    )
    model, tokenizer = load_with_adapter(base, adapter, store)
    batch = [row["prompt"] for row in store.read_jsonl(data.eval)[:prompts]]
    times = []
    for _ in range(2 if variant.engine == "fast" else 1):
        _synchronize()
        started = time.perf_counter()
        generate(model, tokenizer, batch, config)
        _synchronize()
        times.append(time.perf_counter() - started)
    gap = {"logp_gap": logp_gap(model, tokenizer, batch[:4])} if variant.engine == "fast" else {}
    return {"eval_s": times[-1], "eval_first_s": times[0], **gap}


def logp_gap(policy: Any, tokenizer: Any, prompts: list) -> float:
    """Mean |log p_rollout - log p_policy| of sampled completion tokens: how far the fast
    engine's folded weights sample from the distribution the loss computes with."""
    import torch
    from transformers import GenerationConfig

    from tasks.generation.rollout import FAST, RolloutModel

    rollout = RolloutModel(policy, FAST)
    config = GenerationConfig(
        max_new_tokens=128, do_sample=True, temperature=1.0, top_k=0,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    gaps = []
    for prompt in prompts:
        text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
        ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
        ids = ids.to(policy.device)
        sequence = rollout.generate(ids, torch.ones_like(ids), config)
        with torch.no_grad():
            logps = [
                torch.log_softmax(model(sequence).logits[0, ids.shape[1] - 1 : -1].float(), -1)
                for model in (rollout.model, policy)
            ]
        tokens = sequence[0, ids.shape[1] :].unsqueeze(-1)
        chosen = [logp.gather(-1, tokens).squeeze(-1) for logp in logps]
        gaps.append((chosen[0] - chosen[1]).abs().mean().item())
    return statistics.fmean(gaps)


# -- the cpu profile's second table: what resuming costs ---------------------------------------


def resume_cost(recipe: Any, steps: int) -> None:
    """Start to first step for a fresh run stopped at its mid-run checkpoint, then for the same
    run started again (it resumes from the checkpoint in the store)."""
    import tasks.training.train
    from tasks.core.store import ArtifactStore
    from tasks.models.model import prepare_base_model
    from tasks.prep.build import prepare_data
    from tasks.prep.olist import fingerprint_source

    half = steps // 2
    training = recipe.training.model_copy(
        update={"max_steps": steps, "save_steps": half, "heldout_prompts": 0}
    )
    timers, stop_at = Timers(), [half]
    instrument(timers, stop_at)
    with tempfile.TemporaryDirectory() as tmp:
        store = ArtifactStore(tmp)
        data = prepare_data(fingerprint_source(str(ROOT / "data" / "olist")), recipe.data, store)
        base = prepare_base_model(recipe.model, data, store)
        started = time.perf_counter()
        stopped = tasks.training.train.train_seed(training, recipe.lora, data, base, 0, store)
        fresh = timers.first_step_at - started
        timers.first_step_at, stop_at[0] = None, None
        # A crash leaves no record of a finished run: without this, the run is handed back.
        finished = tasks.training.train.run_folder(stopped.run_key)
        store.remove(f"{finished}/{tasks.training.train.RECORD_FILE}")
        started = time.perf_counter()
        tasks.training.train.train_seed(training, recipe.lora, data, base, 0, store)
        resumed = timers.first_step_at - started
    print(f"\nResume, {recipe.name}, {steps} steps, stopped after the step-{half} checkpoint\n")
    print("| measure | seconds |")
    print("|---|---:|")
    print(f"| fresh start to first step | {fresh:.2f} |")
    print(f"| restart to first new step, resuming | {resumed:.2f} |")
    print(f"| resume overhead | {resumed - fresh:+.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=sorted(PROFILES), default="cpu")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--variants", help="comma-separated keys (the reference always runs)")
    parser.add_argument(
        "--tokenizer", type=Path, default=ROOT.parent / "shared/data/tokenizers/qwen2.5"
    )
    parser.add_argument("--eval-prompts", type=int, default=16)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(json.loads(args.worker))
        return
    names = args.variants.split(",") if args.variants else None
    run(args.profile, args.steps, names, args.tokenizer, args.eval_prompts)


if __name__ == "__main__":
    main()
