"""Step 1: Olist CSVs -> train and eval prompt sets and the SQLite database, deterministically.

Everything is read and checked before anything is written, and the outputs are built in a
temporary folder and put into the store as one complete folder, so a failed prep leaves nothing.
Orders are dealt out once: an order (and so its review) lands in at most one prompt of one split,
and on the same side of the split in every later prep of grown data (tasks/prep/split.py).
"""

from __future__ import annotations

import hashlib
import json
import random
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
from prefect import task

from configs.recipe import DataConfig
from rewards import TASKS
from tasks.core.caching import ContentKey
from tasks.core.manifests import DataSource, PreparedData
from tasks.core.store import ArtifactStore
from tasks.prep.database import build_database
from tasks.prep.errors import require
from tasks.prep.extraction import extraction_prompt, has_review_text
from tasks.prep.insights import insights_prompts
from tasks.prep.olist import load_tables
from tasks.prep.orders import order_view, with_seller_and_payment
from tasks.prep.push import over_situations, push_prompt
from tasks.prep.split import partition
from tasks.prep.sql_qa import sql_prompts

TRAIN_FILE, EVAL_FILE, DATABASE_FILE = "train.jsonl", "eval.jsonl", "olist.sqlite"


def _before_unseen_months(orders: pd.DataFrame, months: int) -> tuple[pd.DataFrame, str]:
    """The orders purchased before the data's last `months` calendar months, and how an error
    names them ("" when no month is held out)."""
    if not months:
        return orders, ""
    purchased = orders["order_purchase_timestamp"]
    cutoff = (purchased.max().to_period("M") - (months - 1)).start_time
    named = f" purchased before {cutoff:%Y-%m-%d} (data.unseen_months: {months})"
    return orders[purchased < cutoff], named


def _deal_orders(
    orders: pd.DataFrame, config: DataConfig, rng: random.Random
) -> dict[str, pd.DataFrame]:
    """Disjoint order sets for extraction/push x eval/train. An order's side comes from its id
    alone (tasks/prep/split.py); which orders of a side are used is drawn with `rng`, from those
    purchased before the data's last `config.unseen_months` months."""
    orders, dated = _before_unseen_months(orders, config.unseen_months)
    permutation = list(range(len(orders)))
    rng.shuffle(permutation)
    shuffled = orders.iloc[permutation]
    eval_orders, train_orders = (
        shuffled[shuffled["order_id"].isin(ids)]
        for ids in partition(shuffled["order_id"], str, config.eval_share)
    )
    dealt: dict[str, pd.DataFrame] = {}
    for side, pool, counts in (
        ("eval", eval_orders, config.eval_per_task),
        ("train", train_orders, config.train_counts()),
    ):
        with_text = pool[pool.apply(has_review_text, axis=1)]
        require(
            len(with_text), counts["extraction"], side=side, task="extraction",
            what=f"orders with a review comment{dated}",
        )  # fmt: skip
        extraction = with_text.iloc[: counts["extraction"]]
        rest = pool[~pool["order_id"].isin(extraction["order_id"])]
        require(
            len(rest), counts["push"], side=side, task="push", what=f"orders left for push{dated}"
        )
        dealt[f"{side}_extraction"] = extraction
        dealt[f"{side}_push"] = over_situations(rest, counts["push"])
    return dealt


def build_prompt_sets(
    tables: dict[str, pd.DataFrame], config: DataConfig, database: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(config.prep_seed)
    train_counts, eval_counts = config.train_counts(), dict(config.eval_per_task)
    orders = order_view(tables)
    dealt = _deal_orders(orders, config, rng)

    def per_order(name: str, build: Any) -> list[dict[str, Any]]:
        return [build(order) for _, order in dealt[name].iterrows()]

    def extraction(order: pd.Series) -> dict[str, Any]:
        return extraction_prompt(order, instructions=config.extraction_instructions)

    sql_train, sql_eval = sql_prompts(
        database, train_counts["sql_qa"], eval_counts["sql_qa"], config.eval_share, rng
    )
    insights_train, insights_eval = insights_prompts(
        with_seller_and_payment(orders, tables),
        train_counts["insights"],
        eval_counts["insights"],
        config.eval_share,
        rng,
    )
    train = (
        per_order("train_extraction", extraction)
        + sql_train
        + insights_train
        + per_order("train_push", lambda order: push_prompt(order, rng))
    )
    eval_ = (
        per_order("eval_extraction", extraction)
        + sql_eval
        + insights_eval
        + per_order("eval_push", lambda order: push_prompt(order, rng))
    )
    rng.shuffle(train)
    eval_.sort(key=lambda row: (TASKS.index(row["task"]), row["prompt_id"]))
    return train, eval_


def _jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in rows)


def _counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {t: sum(1 for row in rows if row["task"] == t) for t in TASKS}


def prepare_data(source: DataSource, config: DataConfig, store: ArtifactStore) -> PreparedData:
    tables = load_tables(source)
    with tempfile.TemporaryDirectory(prefix="tucano-prep-") as tmp:
        work = Path(tmp)
        build_database(tables, work / DATABASE_FILE)
        train, eval_ = build_prompt_sets(tables, config, work / DATABASE_FILE)
        (work / TRAIN_FILE).write_text(_jsonl(train), encoding="utf-8")
        (work / EVAL_FILE).write_text(_jsonl(eval_), encoding="utf-8")
        digests = {
            name: hashlib.sha256((work / name).read_bytes()).hexdigest()
            for name in (TRAIN_FILE, EVAL_FILE, DATABASE_FILE)
        }
        fingerprint = hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()
        counts = {"train": _counts(train), "eval": _counts(eval_)}
        (work / "manifest.json").write_text(
            json.dumps(
                {
                    "source": source.model_dump(),
                    "config": config.model_dump(mode="json"),
                    "counts": counts,
                    "files": digests,
                },
                indent=2,
                sort_keys=True,
            ),
            encoding="utf-8",
        )
        folder = f"prepared/{fingerprint[:16]}"
        store.put_dir(work, folder)
    return PreparedData(
        fingerprint=fingerprint,
        folder=folder,
        train=f"{folder}/{TRAIN_FILE}",
        eval=f"{folder}/{EVAL_FILE}",
        database=f"{folder}/{DATABASE_FILE}",
        counts=counts,
    )


prepare_data_task = task(
    prepare_data,
    name="prepare-data",
    cache_policy=ContentKey(),
    persist_result=True,
)
