"""`tucano analyze`: the production model reads reviews no model of this project has seen.

Every review with a comment (a title or a message, however short: "Péssimo" is a verdict) gets
exactly one JSONL row, keyed by its order and review id: analysed (the extraction prompt of data
prep, the same template; a completion from the model; the parsed 10-field object, or null and
why; the reward the training used), or `skipped` with the reason, where analysing it would say
nothing new (its order is in the prompt sets the model was trained or judged on). A review whose
order's tables are not in the folder is still analysed, its row saying which details were
unavailable and which gold checks were not scored. Only the reviews file is required. Training's
filters (short comments, a review id shared by several orders) belong to data prep, not here.
Rows are appended and flushed batch by batch: a rerun after a kill skips the reviews already
written (a torn last line is dropped first), so the file is never half a row, and a SIGTERM or
SIGINT ends the run between two batches (tasks/core/signals.py).
"""

from __future__ import annotations

import json
import os
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from configs.recipe import EvalConfig
from tasks.core import signals
from tasks.evaluation.field_agreement import by_model, field_agreement, render, render_trust
from tasks.generation.answering import generate_batches, score_row
from tasks.prep.extraction import ORDER_LABELS, extraction_prompt
from tasks.prep.olist import TABLES, read_tables, tables_present
from tasks.prep.orders import order_view
from tasks.production.checks import checks_markdown, format_value, parsed_fields

# The tables an order's details come from (customers only because the order view joins them);
# payments, sellers and the category translation are not needed to analyse reviews.
ORDER_TABLES = ("orders", "order_items", "products", "customers")
ORDER_DETAILS = (
    "category",
    "order_purchase_timestamp",
    "order_estimated_delivery_date",
    "order_delivered_customer_date",
    "items_value",
    "delivered_late",
)
# The extraction fields whose gold comes from the order, not the review: unscored without it.
ORDER_GOLD = ("delivered_late", "product_category")


# Why a review with a comment gets no analysis: its row says this instead.
SEEN_ORDER = "its order is in the prompt sets the model was trained or judged on"
REVIEW_KEY = ("order_id", "review_id")


def has_comment(review: pd.Series) -> bool:
    return bool(review["review_comment_title"].strip() or review["review_comment_message"].strip())


def review_prompts(uri: str, instructions: str = "described") -> list[dict[str, Any]]:
    """Extraction prompt rows for every review with a comment in the folder (one per order and
    review id), in order id order, each with `missing`: None, or what its order's details could
    not say and why, and `skipped`: None (the caller knows which orders the model saw); asked with
    the recipe's `instructions` (data.extraction_instructions), as the model trained. Bad input
    stops with the file and column named (OlistSchemaError); of the files, only the reviews are
    required."""
    present = tables_present(uri, ORDER_TABLES)
    tables = read_tables(uri, ("order_reviews", *present))
    reviews = tables["order_reviews"].drop_duplicates(list(REVIEW_KEY))
    reviews = reviews[reviews.apply(has_comment, axis=1)]
    absent = [TABLES[name].file for name in ORDER_TABLES if name not in present]
    if absent:
        details = pd.DataFrame(columns=["order_id", *ORDER_DETAILS])
        why = f"the folder has no {', '.join(absent)}"
    else:
        details = order_view(tables)[["order_id", *ORDER_DETAILS]]
        why = (
            f"its order is not in {TABLES['orders'].file} with an item in "
            f"{TABLES['order_items'].file}"
        )
    joined = reviews.merge(details, on="order_id", how="left", indicator=True)
    joined["category"] = joined["category"].fillna("")
    rows = []
    for _, order in joined.sort_values(list(REVIEW_KEY)).iterrows():
        known = order["_merge"] == "both"
        row = extraction_prompt(order, order_known=known, instructions=instructions)
        row["missing"] = (
            None
            if known
            else {"why": why, "unavailable": list(ORDER_LABELS), "not_scored": list(ORDER_GOLD)}
        )
        row["skipped"] = None
        rows.append(row)
    return rows


def skipped_row(prompt: dict[str, Any]) -> dict[str, Any]:
    return {key: prompt[key] for key in (*REVIEW_KEY, "review_score", "skipped")}


def analysed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with a model's answer (the monitor and the summary's reward judge these)."""
    return [row for row in rows if not row.get("skipped")]


def analysis_row(prompt: dict[str, Any], generation: dict[str, Any]) -> dict[str, Any]:
    parsed, why = parsed_fields(generation["completion"])
    return {
        "order_id": prompt["order_id"],
        "review_id": prompt["review_id"],
        "completion": generation["completion"],
        "parsed": parsed,
        "parse_error": why,
        "truncated": generation["truncated"],
        "tokens": generation["tokens"],
        "missing": prompt["missing"],
        # The customer's own stars: what the monitor checks the extracted sentiment against;
        # with the review and the order's lateness, what each field is read against.
        "review_score": prompt["review_score"],
        "review_text": prompt["review_text"],
        "gold_delivered_late": prompt["gold_delivered_late"],
        # The reward training used, through the same code path (no database: extraction).
        **score_row(prompt, generation, None),
        "skipped": None,
    }


def written_rows(output: Path) -> list[dict[str, Any]]:
    """The rows a previous run wrote; a last line torn by a kill is cut off the file first."""
    if not output.exists():
        return []
    content = output.read_bytes()
    whole = content[: content.rfind(b"\n") + 1]
    if len(whole) != len(content):
        with output.open("r+b") as handle:
            handle.truncate(len(whole))
    return [json.loads(line) for line in whole.decode("utf-8").splitlines() if line.strip()]


def _key(row: dict[str, Any]) -> tuple[str, str]:
    return row["order_id"], row["review_id"]


def analyze(
    model: Any,
    tokenizer: Any,
    prompts: list[dict[str, Any]],
    config: EvalConfig,
    output: Path,
) -> list[dict[str, Any]]:
    """Every prompt's row in `output`, generating only for those neither written yet nor
    `skipped` (their rows say why); all rows back."""
    output.parent.mkdir(parents=True, exist_ok=True)
    rows = written_rows(output)
    done = {_key(row) for row in rows}
    todo = [prompt for prompt in prompts if _key(prompt) not in done]
    reasons = [skipped_row(prompt) for prompt in todo if prompt["skipped"]]
    todo = [prompt for prompt in todo if not prompt["skipped"]]

    def kept() -> str:
        return f"the {len(rows)} rows written so far are in {output}"

    with output.open("a", encoding="utf-8") as sink, signals.keeping(kept):
        _append(sink, rows, reasons)
        if not todo:
            return rows
        batches = generate_batches(
            model, tokenizer, [p["prompt"] for p in todo], config, done=len(rows),
            stage="analysis",
        )  # fmt: skip
        start = 0
        for generations in batches:
            handled = todo[start : start + len(generations)]
            start += len(generations)
            _append(sink, rows, list(map(analysis_row, handled, generations)))
    return rows


def _append(sink: Any, rows: list[dict[str, Any]], batch: list[dict[str, Any]]) -> None:
    """One batch of rows onto the file, whole: a signal waits until they are on disk."""
    if not batch:
        return
    with signals.deferred():
        sink.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in batch))
        sink.flush()
        os.fsync(sink.fileno())
        rows.extend(batch)
    signals.stop_if_requested()


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Reviews, analysed and skipped by reason; of the analysed, those without their order's
    details, mean reward per component, counts by sentiment and churn risk (parse rate,
    truncation and the rest are the monitor's checks)."""
    answered = analysed(rows)
    summary = {
        "reviews": len(rows),
        "analysed": len(answered),
        "skipped": dict(
            sorted(Counter(row["skipped"] for row in rows if row.get("skipped")).items())
        ),
    }
    if not answered:
        return summary
    components = sorted({name for row in answered for name in row["components"]})
    return summary | {
        # .get: a file a rerun appends to may hold rows from a version without the field.
        "without_order": sum(row.get("missing") is not None for row in answered),
        "mean_components": {
            name: statistics.fmean(
                row["components"][name] for row in answered if name in row["components"]
            )
            for name in components
        },
        "by_sentiment": _counts(answered, "sentiment"),
        "by_churn_risk": _counts(answered, "churn_risk"),
        "fields": field_agreement(map(_read_against, answered)),
    }


def eval_agreement(
    eval_rows: list[dict[str, Any]], eval_prompts: list[dict[str, Any]]
) -> dict[str, list[int]]:
    """`field_agreement` of the model's own answers on the eval split it was judged on: what its
    flags can be trusted for, measured where the reviews were read with their orders."""
    return by_model({"eval": eval_rows}, {row["prompt_id"]: row for row in eval_prompts})["eval"]


def _read_against(row: dict[str, Any]) -> tuple[str, str | None, int, bool | None]:
    """An answer with what its fields are read against (.get: a row of a version that kept no
    review is read against its stars)."""
    return (
        row["completion"],
        row.get("review_text"),
        row["review_score"],
        row.get("gold_delivered_late"),
    )


def _counts(rows: list[dict[str, Any]], field: str) -> dict[str, int]:
    counts = Counter(row["parsed"][field] if row["parsed"] else "unparsed" for row in rows)
    return dict(sorted(counts.items()))


def summary_markdown(
    summary: dict[str, Any], decision: dict[str, Any] | None, output: str, plot: str | None
) -> str:
    skipped = "".join(f"; skipped, {why}: {count}" for why, count in summary["skipped"].items())
    reviews = (
        f"- Reviews with a comment: {summary['reviews']} (analysed: {summary['analysed']}"
        f"{skipped}; rows: `{output}`)"
    )
    if not summary["analysed"]:
        return f"# Review analysis\n\nNo new reviews to analyse.\n\n{reviews}\n"
    lines = [
        "# Review analysis",
        "",
        reviews,
        f"- Plot: `{plot}`",
        f"- Without their order's details (delivery and category gold not scored): "
        f"{summary['without_order']}",
        "",
        f"## Monitoring: {decision['status']}",
        "",
        decision["reason"],
        "",
        checks_markdown(decision["checks"]),
        "| Reward component | Mean |",
        "|---|---:|",
        *(f"| {name} | {value:+.3f} |" for name, value in summary["mean_components"].items()),
    ]
    for title, key in (("Sentiment", "by_sentiment"), ("Churn risk", "by_churn_risk")):
        lines += ["", f"| {title} | Reviews |", "|---|---:|"]
        lines += [f"| {value} | {count} |" for value, count in summary[key].items()]
    if summary.get("fields"):
        lines += ["", *render({"answers": summary["fields"]}, "Each field against the review")]
    if summary.get("eval_fields"):
        measured = {"its eval split": summary["eval_fields"]}
        if summary.get("fields"):
            measured["these reviews"] = summary["fields"]
        lines += render_trust(measured, "What each flag can be trusted for")
    return "\n".join(lines) + "\n"


# Bar colours of the checks panel, by verdict.
VERDICT_COLOURS = {"pass": "#6a994e", "fail": "#bc4749", "not measured": "#adb5bd"}


def summary_plot(
    rows: list[dict[str, Any]], summary: dict[str, Any], checks: list[dict[str, Any]], path: Path
) -> Path:
    """Reward distribution, the monitor's checks against their thresholds, and reviews by
    sentiment and by churn risk."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on workers or CI
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=(13, 8))
    grid = figure.add_gridspec(2, 3)
    gauges = figure.add_subplot(grid[0, :])
    reward, sentiment, churn = (figure.add_subplot(grid[1, column]) for column in range(3))
    # Every check is a number in [0, 1] (a share, a mean reward, a p-value): one axis for all.
    positions = list(range(len(checks)))[::-1]
    values = [check["value"] or 0.0 for check in checks]
    gauges.barh(positions, values, color=[VERDICT_COLOURS[check["verdict"]] for check in checks])
    gauges.scatter(
        [check["threshold"] for check in checks], positions, marker="|", s=400, color="black",
        zorder=3,
    )  # fmt: skip
    for position, value, check in zip(positions, values, checks, strict=True):
        shown = format_value(check["value"], check["unit"])
        gauges.text(value + 0.01, position, f"{shown}: {check['verdict']}", va="center")
    gauges.set_yticks(positions, [check["label"] for check in checks])
    gauges.set(title="Monitoring checks (black tick: threshold)", xlim=(0, 1.2))
    reward.hist([row["total"] for row in rows], bins=20, range=(0, 1), color="#3b6ea5")
    reward.set(title="Reward per review", xlabel="reward", ylabel="reviews")
    for axis, key, title in (
        (sentiment, "by_sentiment", "Sentiment"),
        (churn, "by_churn_risk", "Churn risk"),
    ):
        counts = summary.get(key, {})
        axis.bar(list(counts), list(counts.values()), color="#3b6ea5")
        axis.set(title=title, ylabel="reviews")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
