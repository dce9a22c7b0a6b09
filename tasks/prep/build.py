"""Step 1: Olist CSVs -> train and eval prompt sets and the SQLite database, deterministically.

Everything is read and checked before anything is written, and the outputs are built in a
temporary folder and put into the store as one complete folder, so a failed prep leaves nothing.
Orders are dealt out once: an order (and so its review) lands in at most one prompt of one split.
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

from configs.recipe import TASKS, DataConfig
from tasks.caching import ContentKey
from tasks.manifests import DataSource, PreparedData
from tasks.prep.database import build_database
from tasks.prep.extraction import extraction_prompt, has_review_text
from tasks.prep.insights import insights_prompts
from tasks.prep.olist import load_tables
from tasks.prep.orders import order_view
from tasks.prep.push import push_prompt
from tasks.prep.sql_qa import sql_prompts
from tasks.store import ArtifactStore

TRAIN_FILE, EVAL_FILE, DATABASE_FILE = "train.jsonl", "eval.jsonl", "olist.sqlite"


def _deal_orders(
    orders: pd.DataFrame, train: dict[str, int], eval_: dict[str, int], rng: random.Random
) -> dict[str, pd.DataFrame]:
    """Disjoint order sets for extraction/push x eval/train, eval first so it is always full."""
    permutation = list(range(len(orders)))
    rng.shuffle(permutation)
    shuffled = orders.iloc[permutation]
    with_text = shuffled[shuffled.apply(has_review_text, axis=1)]
    n_eval, n_train = eval_["extraction"], train["extraction"]
    if len(with_text) < n_eval + n_train:
        raise ValueError(
            f"the data has {len(with_text)} orders with a review comment; extraction needs "
            f"{n_train} train + {n_eval} eval"
        )
    dealt = {
        "eval_extraction": with_text.iloc[:n_eval],
        "train_extraction": with_text.iloc[n_eval : n_eval + n_train],
    }
    used = set(with_text["order_id"].iloc[: n_eval + n_train])
    rest = shuffled[~shuffled["order_id"].isin(used)]
    n_eval, n_train = eval_["push"], train["push"]
    if len(rest) < n_eval + n_train:
        raise ValueError(
            f"after extraction, {len(rest)} orders are left; "
            f"push needs {n_train} train + {n_eval} eval"
        )
    dealt["eval_push"] = rest.iloc[:n_eval]
    dealt["train_push"] = rest.iloc[n_eval : n_eval + n_train]
    return dealt


def build_prompt_sets(
    tables: dict[str, pd.DataFrame], config: DataConfig, database: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(config.prep_seed)
    train_counts, eval_counts = config.train_counts(), dict(config.eval_per_task)
    orders = order_view(tables)
    dealt = _deal_orders(orders, train_counts, eval_counts, rng)

    def per_order(name: str, build: Any) -> list[dict[str, Any]]:
        return [build(order) for _, order in dealt[name].iterrows()]

    sql = sql_prompts(database, train_counts["sql_qa"] + eval_counts["sql_qa"], rng)
    insights_train, insights_eval = insights_prompts(
        orders, train_counts["insights"], eval_counts["insights"], rng
    )
    train = (
        per_order("train_extraction", extraction_prompt)
        + sql[eval_counts["sql_qa"] :]
        + insights_train
        + per_order("train_push", lambda order: push_prompt(order, rng))
    )
    eval_ = (
        per_order("eval_extraction", extraction_prompt)
        + sql[: eval_counts["sql_qa"]]
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


def data_database(prepared: PreparedData, store: ArtifactStore) -> Path:
    """A local path to the prepared SQLite copy (downloaded once when the store is remote)."""
    return store.local_dir(prepared.folder) / DATABASE_FILE


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
    cache_policy=ContentKey(modules=("tasks.prep", "rewards.extraction")),
    persist_result=True,
)
