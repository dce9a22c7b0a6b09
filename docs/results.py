"""A run's results, recorded from its store, and the README's numbers written from the record.

No number of the README's report block is typed by hand: `record` reads a finished run's store
(its latest pipeline record, report and eval answers) into `docs/results/<recipe>.json`, with the
machine, the commit and the wall time said on the command line; `readme` rewrites the block
between the README's markers from the default recipe's record (tests/test_docs.py fails when the
two differ).

    .venv/bin/python docs/results.py record --store artifacts --wall 1800 \\
        --machine "the 2-core CPU machine, otherwise idle" --how "make pipeline, fresh clone"
    .venv/bin/python docs/results.py readme
    .venv/bin/python docs/generate.py    # the Results page and the pages' recorded figures
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rewards import TASKS  # noqa: E402
from tasks.core.progress import duration  # noqa: E402
from tasks.evaluation.claim_truth import MEASURES  # noqa: E402

RESULTS = ROOT / "docs" / "results"
README = ROOT / "README.md"
BEGIN = "<!-- The default run's numbers: written by `docs/results.py readme`, never by hand. -->"
END = "<!-- End of the default run's numbers. -->"
# The judgement fields the block shows: the flags GRPO was seen to leave at one value, and the
# summary that copies the review's first line instead of saying what the review is about.
SHOWN_FIELDS = (
    "delivery_issue: flagged where stated",
    "delivery_issue: flagged where ruled out",
    "product_issue: flagged where stated",
    "seller_issue: flagged where stated",
    "would_recommend: as the review settles it",
    "summary: copies the review's first line",
)


# The example is a complaint, where what an analyst reads matters, and the middle one: picked
# by how much GRPO changed it, it was the review the SFT model had read worst (a one-star "não
# recebi o produto" answered "negocios" and "would_recommend": true), the run's outlier shown as
# its model.
COMPLAINT_STARS = (1, 2)


def _example(
    store: Any, report: dict[str, Any], eval_rows: str, prompts: dict[str, dict[str, Any]]
) -> dict[str, Any] | None:
    """The best seed's answer to the one- or two-star eval review at the median of its rewards on
    them, beside the SFT model's: the review, both answers, and how many of the seed's answers to
    such reviews are the SFT model's word for word."""
    per_seed = report["comparison"]["per_seed"]
    if not per_seed:
        return None
    best = max(per_seed, key=lambda seed: (per_seed[seed]["extraction"]["delta"], seed))
    scores = [json.loads(line) for line in store.read_text(eval_rows).splitlines()]
    start = {row["prompt_id"]: row for row in scores if row.get("seed") is None}
    complaints = sorted(
        (
            row
            for row in scores
            if row.get("seed") == int(best)
            and row["task"] == "extraction"
            and prompts[row["prompt_id"]].get("review_score") in COMPLAINT_STARS
        ),
        key=lambda row: (row["total"], row["prompt_id"]),
    )
    if not complaints:
        return None
    row = complaints[(len(complaints) - 1) // 2]
    return {
        "prompt_id": row["prompt_id"],
        "seed": int(best),
        "review": prompts[row["prompt_id"]]["prompt"][-1]["content"],
        "complaints": len(complaints),
        "unchanged": sum(
            r["completion"] == start[r["prompt_id"]]["completion"] for r in complaints
        ),
        "sft": {
            "answer": start[row["prompt_id"]]["completion"],
            "reward": start[row["prompt_id"]]["total"],
        },
        "tuned": {"answer": row["completion"], "reward": row["total"]},
    }


HISTORY = "history"
SUMMARY_KEYS = ("date", "commit", "machine", "how", "wall_seconds", "seeds", "verdict")


def record(store_uri: str, wall: float, machine: str, how: str, commit: str) -> Path:
    from tasks.core.store import ArtifactStore

    store = ArtifactStore(store_uri)
    latest = store.read_json("pipeline/latest.json")
    report = store.read_json(latest["report"])
    folder = latest["report"].rsplit("/", 1)[0]
    prompts = {row["prompt_id"]: row for row in store.read_jsonl(latest["prepared"]["eval"])}
    example = _example(store, report, f"{folder}/scores.jsonl", prompts)
    result = {
        "recipe": report["recipe"],
        "date": date.today().isoformat(),
        "commit": commit,
        "machine": machine,
        "how": how,
        "wall_seconds": wall,
        "stage_seconds": dict(latest["stage_seconds"]),
        "seeds": report["seeds"],
        "verdict": report["comparison"]["across_seeds"],
        "pooled": {
            task: {key: r[key] for key in ("start_mean", "tuned_mean", "delta")}
            for task, r in report["comparison"]["pooled"].items()
        },
        "fields": report.get("fields", {}),
        "claims": report.get("claims", {}),
        "sentiment": report.get("sentiment", {}),
        "truncated": {
            model: {task: s["truncated_share"] for task, s in tasks.items()}
            for model, tasks in report["generation"].items()
        },
        "example": example,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{report['recipe']}.json"
    path.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    # Every record of the recipe, one line each: the latest replaces the file above, and the
    # Results page shows how the verdict and the time went from record to record.
    (RESULTS / HISTORY).mkdir(exist_ok=True)
    summary = {key: result[key] for key in SUMMARY_KEYS}
    with (RESULTS / HISTORY / f"{report['recipe']}.jsonl").open("a", encoding="utf-8") as lines:
        lines.write(json.dumps(summary, ensure_ascii=False) + "\n")
    return path


def _stages(result: dict[str, Any]) -> str:
    stages = result["stage_seconds"]
    return ", ".join(f"{name} {duration(seconds)}" for name, seconds in stages.items())


def readme_block(result: dict[str, Any]) -> str:
    verdict = result["verdict"]
    lines = [
        BEGIN,
        # The commit is on the Results page, which is the record; the README says what ran.
        f"Measured {result['date']} ({result['how']}; {result['machine']}): "
        f"**{duration(result['wall_seconds'])}** from an empty store "
        f"({_stages(result)}). Its `report.md`, verdict across seeds {result['seeds']}, GRPO "
        "against the SFT model it started from:",
        "",
        "| Task | Δ mean ± std over seeds | seeds significantly better | seeds significantly "
        "worse | verdict |",
        "|---|---|---:|---:|---|",
        *(
            f"| {task} | {v['delta_mean']:+.3f} ± {v['delta_std']:.3f} | "
            f"{v['seeds_significantly_better']} of {v['seeds']} (need {v['majority_needed']}) | "
            f"{v['seeds_significantly_worse']} of {v['seeds']} | {v['verdict']} |"
            for task, v in ((t, verdict[t]) for t in (*TASKS, "overall") if t in verdict)
        ),
        "",
        "Each extraction field against the review's reading, on the eval split's reviews:",
        "",
        "| Field | " + " | ".join(result["fields"]) + " |",
        "|---|" + "---:|" * len(result["fields"]),
        *(
            f"| {key} | "
            + " | ".join(f"{c} of {n}" for c, n in (fs[key] for fs in result["fields"].values()))
            + " |"
            for key in SHOWN_FIELDS
        ),
    ]
    claims = result.get("claims")
    if claims:
        lines += [
            "",
            "What the insights answers claim about their table (rewards/table_claims.py reads "
            "each claim and holds it to the table):",
            "",
            "| Measure | " + " | ".join(claims) + " |",
            "|---|" + "---:|" * len(claims),
            *(
                f"| {key} | "
                + " | ".join(f"{c} of {n}" for c, n in (cs[key] for cs in claims.values()))
                + " |"
                for key in MEASURES
            ),
        ]
    example = result.get("example")
    if example:
        lines += ["", example_caption(example) + ":", "", *example_blocks(example)]
    return "\n".join([*lines, END])


def example_caption(example: dict[str, Any]) -> str:
    """Which review the example is, how it was picked, and the two answers' rewards."""
    seed, sft, tuned = example["seed"], example["sft"], example["tuned"]
    answers = (
        f"What the SFT model answered (reward {sft['reward']:.2f}), and seed {seed} after GRPO, "
        "word for word the same"
        if sft["answer"] == tuned["answer"]
        else f"What the SFT model answered (reward {sft['reward']:.2f}) and what seed {seed} "
        f"answers after GRPO ({tuned['reward']:.2f})"
    )
    # The seed best on extraction may have kept its start while the others moved: what is said
    # of it is said of it alone.
    picked = (
        "the seed best on extraction, which kept the SFT model: its answers to them are the SFT "
        "model's word for word"
        if example["unchanged"] == example["complaints"]
        else f"the seed best on extraction; {example['unchanged']} of its "
        f"{example['complaints']} answers to them are the SFT model's word for word"
    )
    return (
        f"The eval split's middle complaint: of its {example['complaints']} one- and two-star "
        f"reviews, the one at the median of seed {seed}'s rewards ({picked}). {answers}"
    )


def example_blocks(example: dict[str, Any]) -> list[str]:
    """The recorded example's review, then the SFT model's answer and the seed's, as fenced
    blocks: the README and the Results page show it alike."""
    return [
        "```text",
        example["review"],
        "```",
        "",
        "```json",
        example["sft"]["answer"],
        example["tuned"]["answer"],
        "```",
    ]


def write_readme(recipe: str = "cpu_smol") -> None:
    result = json.loads((RESULTS / f"{recipe}.json").read_text(encoding="utf-8"))
    text = README.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    README.write_text(text[:start] + readme_block(result) + text[end:], encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    recording = commands.add_parser("record", help="a finished run's store -> docs/results/")
    recording.add_argument("--store", default="artifacts")
    recording.add_argument("--wall", type=float, required=True, help="the command's seconds")
    recording.add_argument("--machine", required=True)
    recording.add_argument("--how", required=True, help="what ran it, e.g. 'make pipeline'")
    recording.add_argument("--commit", required=True)
    commands.add_parser("readme", help="the README's block from docs/results/cpu_smol.json")
    args = parser.parse_args()
    if args.command == "record":
        print(record(args.store, args.wall, args.machine, args.how, args.commit))
    else:
        write_readme()


if __name__ == "__main__":
    main()
