"""A finished run's model on a month of reviews, as `tucano analyze` reads them, against the stars
and a person's reading.

The month's orders (by purchase date) and their reviews, items, payments and customers, with
every product and seller, go to a folder of their own; `tucano analyze` reads it with a seed's
model of the store's latest pipeline run (by default the seed with the best extraction score on
the eval split), skipping the reviews of orders that model was trained or judged on (none, when
the recipe holds the month out: `data.unseen_months`). The tables
give what the issue's check asks: every review parsed or accounted for, the share cut at the
token limit, sentiment as the stars say per star group, the monitor's decision; and, for June
2018, each issue flag against `data/audit/june2018_low_star_readings.jsonl` (its one- and
two-star reviews read blind, one by one): of the complaints a person read as the product's (or
the seller's), how many the model flags as such and not as a delivery problem.

Usage: .venv/bin/python benchmarks/unseen_month.py --store artifacts [--month 2018-06]
       [--model seed-N] [--recipe configs/cpu_smol.yaml] [--keep DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rewards.review_evidence import read_review  # noqa: E402

OLIST = ROOT / "data" / "olist"
READINGS = {"2018-06": ROOT / "data" / "audit" / "june2018_low_star_readings.jsonl"}
# The tables every order of the month brings its own rows of; the rest are copied whole.
BY_ORDER = ("olist_order_reviews_dataset.csv", "olist_order_items_dataset.csv")
BY_ORDER += ("olist_order_payments_dataset.csv",)
ISSUES = ("product", "seller", "delivery")


def _rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def _write(path: Path, fields: list[str], rows: list[dict[str, str]]) -> None:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fields)
        writer.writeheader()
        writer.writerows(rows)


def month_folder(month: str, folder: Path) -> int:
    """The month's orders and what hangs on them, in Olist's files; the number of orders."""
    folder.mkdir(parents=True, exist_ok=True)
    fields, orders = _rows(OLIST / "olist_orders_dataset.csv")
    orders = [row for row in orders if row["order_purchase_timestamp"].startswith(month)]
    if not orders:
        raise SystemExit(f"no order of {OLIST} was purchased in {month}")
    _write(folder / "olist_orders_dataset.csv", fields, orders)
    ids = {row["order_id"] for row in orders}
    customers = {row["customer_id"] for row in orders}
    for name in BY_ORDER:
        fields, rows = _rows(OLIST / name)
        _write(folder / name, fields, [row for row in rows if row["order_id"] in ids])
    fields, rows = _rows(OLIST / "olist_customers_dataset.csv")
    mine = [row for row in rows if row["customer_id"] in customers]
    _write(folder / "olist_customers_dataset.csv", fields, mine)
    for source in OLIST.glob("*.csv"):
        if not (folder / source.name).exists():
            shutil.copy(source, folder / source.name)
    return len(orders)


def best_seed(store: Path) -> str:
    """seed-N of the latest pipeline run's seed with the best extraction mean on the eval split."""
    latest = json.loads((store / "pipeline" / "latest.json").read_text())
    report = json.loads((store / latest["report"]).read_text())
    per_seed = report["comparison"]["per_seed"]
    seed = max(per_seed, key=lambda s: per_seed[s]["extraction"]["tuned_mean"])
    return f"seed-{seed}"


def analyze(args: argparse.Namespace, data: Path, output: Path) -> dict[str, Any]:
    """`tucano analyze` as a user runs it, with a Prefect home of its own; the monitor's
    decision it recorded."""
    home = Path(tempfile.mkdtemp(prefix="tucano-month-prefect-"))
    env = {**os.environ, "PREFECT_HOME": str(home)}
    env.pop("PREFECT_API_URL", None)
    command = [
        str(ROOT / ".venv" / "bin" / "tucano"), "analyze", "--recipe", args.recipe,
        "--artifacts", str(args.store), "--data", str(data), "--model", args.model,
        "--output", str(output),
    ]  # fmt: skip
    subprocess.run(command, cwd=ROOT, env=env, check=True)
    shutil.rmtree(home, ignore_errors=True)
    return json.loads((args.store / "monitoring" / "latest.json").read_text())


def sentiment_table(rows: list[dict[str, Any]]) -> list[str]:
    answered = [row for row in rows if not row.get("skipped")]
    parsed = [row for row in answered if row.get("parsed")]
    cut = sum(bool(row.get("truncated")) for row in answered)
    lines = [
        f"reviews {len(rows)}: analysed {len(answered)}, skipped {len(rows) - len(answered)} "
        f"(orders the model was trained or judged on); parsed {len(parsed)} of {len(answered)}, "
        f"cut at the limit {cut} ({cut / max(len(answered), 1):.1%})",
        "",
        "| stars | reviews | sentiment as the stars say |",
        "|---|---:|---:|",
    ]
    for stars, expected in (((1, 2), "negativo"), ((4, 5), "positivo")):
        group = [row for row in answered if row.get("review_score") in stars]
        agree = sum((row.get("parsed") or {}).get("sentiment") == expected for row in group)
        share = agree / len(group) if group else 0.0
        lines.append(f"| {stars[0]}-{stars[1]} | {len(group)} | {agree} ({share:.0%}) |")
    return lines


def issue_table(rows: list[dict[str, Any]], readings: Path) -> list[str]:
    """Each issue the person read, flagged by the model as that issue and not as a delivery
    one (a delivery complaint: flagged as delivery); and flags where the person read none. Beside
    them, how many of those complaints the reward's own reading finds in the review's words:
    what SFT's references flag and GRPO pays for as stated (a delivery flag the references also
    take from the order's lateness, which a person's reading does not carry)."""
    read = {row["review_id"]: row for row in map(json.loads, readings.open(encoding="utf-8"))}
    counts: Counter[str] = Counter()
    for row in rows:
        person = read.get(row.get("review_id"))
        if person is None or row.get("skipped"):
            continue
        answer = row.get("parsed") or {}
        counts["read"] += 1
        taught = read_review(person["review_text"], person["review_score"], None).stated_problems()
        for issue in ISSUES:
            flagged = answer.get(f"{issue}_issue") is True
            if person[f"{issue}_issue"]:
                counts[f"{issue} stated"] += 1
                counts[f"{issue} flagged"] += flagged
                counts[f"{issue} taught"] += f"{issue}_issue" in taught
                alone = issue == "delivery" or answer.get("delivery_issue") is not True
                counts[f"{issue} flagged as such"] += flagged and alone
            else:
                counts[f"{issue} not stated"] += 1
                counts[f"{issue} flagged anyway"] += flagged
    lines = [
        f"{counts['read']} of the month's one- and two-star reviews a person read were analysed:",
        "",
        "| issue | the person read it | the reward's reading finds it | flagged | flagged, and "
        "not as delivery | read none, flagged |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for issue in ISSUES:
        stated = counts[f"{issue} stated"]
        as_such = counts[f"{issue} flagged as such"]
        share = f" ({as_such / stated:.0%})" if stated else ""
        as_such_cell = "(the same)" if issue == "delivery" else f"{as_such}{share}"
        lines.append(
            f"| {issue} | {stated} | {counts[f'{issue} taught']} | {counts[f'{issue} flagged']} | "
            f"{as_such_cell} | "
            f"{counts[f'{issue} flagged anyway']} of {counts[f'{issue} not stated']} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a finished run's store")
    parser.add_argument("--month", default="2018-06", help="YYYY-MM of the orders' purchase")
    parser.add_argument("--model", help="seed-N (default: the best seed on extraction)")
    parser.add_argument("--recipe", default=str(ROOT / "configs" / "cpu_smol.yaml"))
    parser.add_argument("--keep", type=Path, help="folder to keep the month's data and rows in")
    args = parser.parse_args()
    args.store = args.store.resolve()
    args.model = args.model or best_seed(args.store)
    folder = args.keep or Path(tempfile.mkdtemp(prefix="tucano-month-"))
    orders = month_folder(args.month, folder / "olist")
    output = folder / "rows.jsonl"
    output.unlink(missing_ok=True)  # analyze resumes after rows already written
    decision = analyze(args, folder / "olist", output)
    rows = [json.loads(line) for line in output.open(encoding="utf-8")]
    print(f"\n{args.month}: {orders} orders; {args.model} of {args.store}\n")
    print("\n".join(sentiment_table(rows)))
    print(f"\nmonitor: {decision['status']} ({decision.get('reason', '')})\n")
    if args.month in READINGS:
        print("\n".join(issue_table(rows, READINGS[args.month])))


if __name__ == "__main__":
    main()
