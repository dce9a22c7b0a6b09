"""How many eval prompts each task needs: the verdict's power, from a finished run's own answers.

The evaluation split's size is a trade: every prompt is answered by the SFT model and by each
seed's tuned model, so it is most of evaluation's time, and too few prompts miss a real change.
This reads a run's per-prompt scores (its report's `scores.jsonl`), takes each task's paired
differences (tuned seed minus SFT, at the report's precision, every seed's pairs pooled) and
resamples them at smaller and larger split sizes: the share of resamples where the report's own
test (one-sided Wilcoxon signed-rank, zeros dropped) is significant at Holm's first step (alpha
over the tasks one seed's report tested, what the most significant task must pass) is the power
at that size.

A row per task: the power to show the change this run saw (for a task GRPO did not train, its
differences are mostly zero: no power, and none needed). The trained task again with half its
gain (its differences and as many zeros again: a seed that changed half as many answers). And a
last row: the power to show a harm as large as the trained task's gain (its differences with the
sign turned), which is what the untrained tasks' prompts are there for.

Usage: .venv/bin/python benchmarks/eval_power.py [--store artifacts] [--trained extraction]
       [--sizes 20,30,40,60,80,120] [--resamples 2000]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rewards import TASKS  # noqa: E402
from tasks.evaluation.stats import ALTERNATIVES, settled, signed_rank  # noqa: E402

ALPHA = 0.05


def differences(store_uri: str) -> tuple[dict[str, np.ndarray], int]:
    """Each task's tuned-minus-SFT score differences, every seed's pairs pooled; and the size of
    the run's Holm family: the most tasks one seed's report tested (a task with too few changed
    answers for a p-value is not in it)."""
    from tasks.core.store import ArtifactStore

    store = ArtifactStore(store_uri)
    latest = store.read_json("pipeline/latest.json")
    report = store.read_json(latest["report"])
    rows = store.read_jsonl(latest["report"].rsplit("/", 1)[0] + "/scores.jsonl")
    start = {row["prompt_id"]: row["total"] for row in rows if row.get("seed") is None}
    out: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        if row.get("seed") is not None:
            out[row["task"]].append(row["total"] - start[row["prompt_id"]])
    family = max(
        sum(seed[task]["p_value"] is not None for task in TASKS if task in seed)
        for seed in report["comparison"]["per_seed"].values()
    )
    return {task: settled(values) for task, values in out.items()}, max(family, 1)


def power(
    diffs: np.ndarray, size: int, alternative: str, resamples: int, seed: int, level: float
) -> float:
    """The share of `resamples` draws of `size` differences where the one-sided test rejects at
    `level`."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(resamples):
        draw = rng.choice(diffs, size=size, replace=True)
        if not np.any(draw):
            continue
        hits += signed_rank(draw, alternative).pvalue < level
    return hits / resamples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default=str(ROOT / "artifacts"))
    parser.add_argument("--trained", default="extraction", help="the task GRPO trained")
    parser.add_argument("--sizes", default="20,30,40,60,80,120")
    parser.add_argument("--resamples", type=int, default=2000)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    diffs, family = differences(args.store)
    gain = diffs[args.trained]
    level = ALPHA / family
    print(f"power at alpha {ALPHA}/{family} (Holm's first step in the run's family of {family}),")
    print(f"{args.resamples} resamples of each size")
    print(f"store {args.store}; harm = {args.trained}'s differences with the sign turned\n")
    header = " | ".join(f"n={size}" for size in sizes)
    print(f"| differences | pairs | mean | sd | nonzero | {header} |")
    print("|---|---:|---:|---:|---:|" + "---:|" * len(sizes))
    better, worse = ALTERNATIVES["p_better"], ALTERNATIVES["p_worse"]
    rows = [(task, diffs[task], better) for task in TASKS if task in diffs]
    # Half the gain: as many unchanged answers again, the changes as they were.
    rows.append((f"{args.trained}, half its gain", np.concatenate([gain, 0 * gain]), better))
    rows.append((f"harm of {args.trained}'s size", -gain, worse))
    for label, draws, alternative in rows:
        cells = " | ".join(
            f"{power(draws, size, alternative, args.resamples, size, level):.2f}" for size in sizes
        )
        print(
            f"| {label} | {len(draws)} | {draws.mean():+.3f} | {draws.std(ddof=1):.3f} | "
            f"{np.count_nonzero(draws) / len(draws):.0%} | {cells} |"
        )


if __name__ == "__main__":
    main()
