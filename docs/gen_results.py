"""The Results page, from the recorded runs in docs/results/*.json, and the recorded figures the
manual's pages quote.

A run is recorded by `docs/results.py record` from its own store (date, commit, machine, how it
was run, wall time, each stage's seconds, the report's verdict and tables); `docs/generate.py`
writes the page and the figures from the records: every number on the Results page comes from a
record, none is typed. A manual page that quotes a recorded figure (how long the default run
takes, its report's tables) holds it between markers,
`<!-- result:cpu_smol:wall -->43 min 7 s<!-- /result -->`, which `fill` rewrites from the
record: the page and the record cannot disagree, and the figure reads in the repository too.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from docs.results import example_blocks, example_caption  # noqa: E402
from tasks.core.progress import duration  # noqa: E402

PAGE = "results.md"
RESULTS = ROOT / "docs" / "results"
DEFAULT_RECIPE = "cpu_smol"
# <!-- result:RECIPE:FIELD -->VALUE<!-- /result -->, FIELD one of FIELDS below; a VALUE of
# several lines (a table) stands between markers on lines of their own.
MARKER = re.compile(r"(<!-- result:([\w-]+):([\w ]+) -->)(.*?)(<!-- /result -->)", re.DOTALL)


def records() -> list[dict[str, Any]]:
    """Every recorded run, the default recipe's first."""
    found = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(RESULTS.glob("*.json"))]
    return sorted(found, key=lambda r: (r["recipe"] != DEFAULT_RECIPE, r["recipe"]))


def _models(record: dict[str, Any]) -> list[str]:
    """The report's models: the base and SFT models first, then the seeds in the recipe's order."""
    named = record["fields"] or record["sentiment"] or record["truncated"]
    seeds = [f"seed {seed}" for seed in record["seeds"] if f"seed {seed}" in named]
    return [name for name in named if name not in seeds] + seeds


def _start(record: dict[str, Any]) -> str:
    """The model GRPO started from: the last of the models before the seeds."""
    return [m for m in _models(record) if not m.startswith("seed ")][-1]


def history(recipe: str) -> list[dict[str, Any]]:
    """Every record of the recipe (docs/results/history/<recipe>.jsonl), the newest first."""
    path = RESULTS / "history" / f"{recipe}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in reversed(path.read_text(encoding="utf-8").splitlines())]


def _verdicts(record: dict[str, Any]) -> str:
    return "; ".join(
        f"{task} {v['verdict']} ({v['seeds_significantly_better']} better, "
        f"{v['seeds_significantly_worse']} worse of {v['seeds']})"
        for task, v in record["verdict"].items()
        if task != "overall"
    )


def run_table(record: dict[str, Any]) -> str:
    """The recipe's recorded runs, the newest (this section's) first."""
    runs = history(record["recipe"]) or [record]
    rows = [
        f"| {run['date']} | `{run['commit']}` | {run['machine']} | {run['how']} "
        f"| {duration(run['wall_seconds'])} | {_verdicts(run)} |"
        for run in runs
    ]
    header = "| date | commit | machine | how it ran | time | verdict per task |"
    return "\n".join([header, "| --- | --- | --- | --- | ---: | --- |", *rows])


def stage_table(record: dict[str, Any]) -> str:
    stages = record["stage_seconds"]
    total = sum(stages.values()) or 1.0
    rows = [f"| {name} | {duration(s)} | {s / total:.0%} |" for name, s in stages.items()]
    return "\n".join(["| stage | time | share |", "| --- | ---: | ---: |", *rows])


def verdict_table(record: dict[str, Any]) -> str:
    rows = []
    for task, v in record["verdict"].items():
        pooled = record["pooled"].get(task, {})
        means = f"{pooled['start_mean']:.3f} | {pooled['tuned_mean']:.3f}" if pooled else "– | –"
        rows.append(
            f"| {task} | {means} | {v['delta_mean']:+.3f} ± {v['delta_std']:.3f} | "
            f"{v['seeds_significantly_better']} of {v['seeds']} (need {v['majority_needed']}) | "
            f"{v['seeds_significantly_worse']} of {v['seeds']} | **{v['verdict']}** |"
        )
    header = (
        f"| task | {_start(record)} | tuned (mean of seeds) | Δ mean ± std over seeds | "
        "seeds significantly better | seeds significantly worse | verdict |"
    )
    return "\n".join([header, "| --- | ---: | ---: | --- | ---: | ---: | --- |", *rows])


def fields_table(record: dict[str, Any], section: str = "fields", rows_are: str = "field") -> str:
    """A record's counts, one row per measure and one column per model: the extraction fields,
    or (section "claims") what the insights answers claim about their table."""
    counts = record.get(section) or {}
    models = [m for m in _models(record) if m in counts]
    keys = list(next(iter(counts.values()), {}))
    rows = [
        f"| {key} | " + " | ".join("{} of {}".format(*counts[m][key]) for m in models) + " |"
        for key in keys
    ]
    names = " | ".join(models)
    return "\n".join(
        [f"| {rows_are} | {names} |", "|---|" + "---:|" * len(models), *rows] if rows else []
    )


def sentiment_table(record: dict[str, Any]) -> str:
    models = _models(record)
    groups = (("negativo", "1-2 stars: negativo"), ("neutro", "3 stars: neutro"))
    groups += (("positivo", "4-5 stars: positivo"),)
    rows = [
        f"| {m} | "
        + " | ".join(
            "{} of {}".format(*record["sentiment"][m][g])
            for g, _ in groups
            if g in record["sentiment"][m]
        )
        + " |"
        for m in models
        if m in record["sentiment"]
    ]
    header = "| model | " + " | ".join(title for _, title in groups) + " |"
    return "\n".join([header, "|---|" + "---:|" * len(groups), *rows] if rows else [])


def truncated_table(record: dict[str, Any]) -> str:
    models = [m for m in _models(record) if m in record["truncated"]]
    tasks = list(next(iter(record["truncated"].values()), {}))
    rows = [
        f"| {m} | " + " | ".join(f"{record['truncated'][m][t]:.0%}" for t in tasks) + " |"
        for m in models
    ]
    return "\n".join(
        ["| model | " + " | ".join(tasks) + " |", "|---|" + "---:|" * len(tasks), *rows]
    )


def example_text(record: dict[str, Any]) -> str:
    example = record.get("example")
    if not example:
        return ""
    return "\n".join(
        [
            example_caption(example) + ".",
            "",
            *example_blocks(example),
        ]
    )


def record_section(record: dict[str, Any]) -> str:
    parts = [
        f"## {record['recipe']} {{#{record['recipe']}}}",
        f"`configs/{record['recipe']}.yaml`, seeds {', '.join(map(str, record['seeds']))}, "
        "from an empty store. Its recorded runs, the newest first (the tables below are the "
        "newest's):",
        run_table(record),
        "Each stage's time:",
        stage_table(record),
        "The verdict, GRPO against the SFT model it started from, on the eval split "
        "([how to read it](how-to/read-a-report.md)):",
        verdict_table(record),
        "Each extraction field against the review's reading, on the eval split's reviews:",
        fields_table(record),
        "What the insights answers claim about their table, on the eval split's summaries:"
        if record.get("claims")
        else "",
        fields_table(record, "claims", "measure"),
        "The sentiment against the stars, on the eval split's reviews:",
        sentiment_table(record),
        "Answers cut at the token limit, by task:",
        truncated_table(record),
        example_text(record),
    ]
    return "\n\n".join(part for part in parts if part) + "\n"


def results_page() -> str:
    header = [
        "# Results",
        "",
        "The recorded runs of the shipped recipes, one section a recipe, written by",
        "`docs/generate.py` from `docs/results/<recipe>.json`; no number here is typed. A",
        "record is written from a finished run's own store by `docs/results.py record`, with the",
        "machine, the commit and the wall time of the command that ran it; the README's report",
        "block is written from the default recipe's record the same way. What changed between",
        "recorded runs, and why: [the changelog](changelog.md).",
        "",
    ]
    return "\n".join(header) + "\n" + "\n".join(record_section(r) for r in records())


def guide_tables(record: dict[str, Any]) -> str:
    """A recipe's recorded tables, as the guide to reading a report shows them."""
    return "\n\n".join(
        [
            f"From the recorded `{record['recipe']}` run of {record['date']} "
            f"([Results](../results.md#{record['recipe']})). The verdict across seeds, with the "
            "pooled means beside it:",
            verdict_table(record),
            "Each extraction field against the review's reading:",
            fields_table(record),
            "The sentiment against the stars:",
            sentiment_table(record),
        ]
    )


def stage_times(record: dict[str, Any]) -> str:
    """The run's stage times as its last log lines print them (flows/pipeline.py's clock)."""
    stages = record["stage_seconds"]
    total = sum(stages.values()) or 1.0
    return ", ".join(f"{name} {duration(s)} ({s / total:.0%})" for name, s in stages.items())


FIELDS = {
    "wall": lambda r: duration(r["wall_seconds"]),
    "date": lambda r: r["date"],
    "machine": lambda r: r["machine"],
    "how": lambda r: r["how"],
    "stage times": stage_times,
    "report tables": guide_tables,
}


def fill(text: str) -> str:
    """`text` with every result marker replaced by its record's value; an unknown recipe or
    field is an error, so a page cannot quote what no record holds."""
    recorded = {r["recipe"]: r for r in records()}

    def value(match: re.Match[str]) -> str:
        opening, recipe, field, old, closing = match.groups()
        if recipe not in recorded or field not in FIELDS:
            raise KeyError(f"{opening}: no record of {recipe!r} or no field {field!r}")
        new = FIELDS[field](recorded[recipe])
        return opening + (f"\n\n{new}\n\n" if old.startswith("\n") else new) + closing

    return MARKER.sub(value, text)
