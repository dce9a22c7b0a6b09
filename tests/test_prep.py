"""Data prep on the real shipped Olist subset: proportions, determinism, no leakage, real golds."""

import json
from pathlib import Path

import pytest

from configs.recipe import DataConfig
from rewards import TASKS
from rewards.context import CONTEXT_KEYS
from tasks.core.store import ArtifactStore
from tasks.prep.build import prepare_data
from tasks.prep.database import query
from tasks.prep.errors import DataTooSmall
from tasks.prep.olist import fingerprint_source

from .conftest import SHIPPED_DATA


def _rows(prepared, split: str) -> list[dict]:
    store, manifest = prepared
    return store.read_jsonl(manifest.train if split == "train" else manifest.eval)


def test_sizes_and_task_mix_are_the_seeds(prepared) -> None:
    train, eval_ = _rows(prepared, "train"), _rows(prepared, "eval")
    assert len(train) == 1480 and len(eval_) == 65
    count = {split: {t: sum(r["task"] == t for r in rows) for t in TASKS} for split, rows in
             (("train", train), ("eval", eval_))}  # fmt: skip
    assert count["train"] == {"extraction": 592, "sql_qa": 592, "insights": 148, "push": 148}
    assert count["eval"] == {"extraction": 20, "sql_qa": 15, "insights": 15, "push": 15}
    assert prepared[1].counts == count


def test_every_row_is_a_chat_prompt_with_its_task_and_context_columns(prepared) -> None:
    for row in _rows(prepared, "train") + _rows(prepared, "eval"):
        assert row["task"] in TASKS
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert {"order_id", "review_id", *CONTEXT_KEYS} <= set(row)


def test_no_order_review_or_prompt_is_in_both_splits(prepared) -> None:
    train, eval_ = _rows(prepared, "train"), _rows(prepared, "eval")
    for key in ("order_id", "review_id", "prompt_id", "question", "data_summary"):
        train_values = {r[key] for r in train if r[key] is not None}
        eval_values = {r[key] for r in eval_ if r[key] is not None}
        assert not train_values & eval_values, key
    prompt_text = {json.dumps(r["prompt"]) for r in train}
    assert not any(json.dumps(r["prompt"]) in prompt_text for r in eval_)


def test_an_order_is_used_at_most_once(prepared) -> None:
    orders = [
        r["order_id"] for r in _rows(prepared, "train") + _rows(prepared, "eval") if r["order_id"]
    ]
    assert len(orders) == len(set(orders))


def test_gold_columns_come_from_the_data(prepared) -> None:
    store, manifest = prepared
    database = Path(store.path(manifest.database))
    extraction = [r for r in _rows(prepared, "eval") if r["task"] == "extraction"]
    for row in extraction:
        assert 1 <= row["review_score"] <= 5
        ((score,),) = query(
            database,
            f"SELECT review_score FROM order_reviews WHERE review_id = '{row['review_id']}'",
        )
        assert score == row["review_score"]
        late = query(
            database,
            "SELECT order_delivered_customer_date > order_estimated_delivery_date FROM orders "
            f"WHERE order_id = '{row['order_id']}' AND order_delivered_customer_date IS NOT NULL",
        )
        assert row["gold_delivered_late"] == (bool(late[0][0]) if late else None)
    for row in _rows(prepared, "eval"):
        if row["task"] == "sql_qa":
            assert json.loads(row["gold_answer"]) == query(database, row["gold_sql"])


def test_prep_is_deterministic_for_a_seed_and_changes_with_it(prepared, tmp_path: Path) -> None:
    store, manifest = prepared
    again = prepare_data(
        fingerprint_source(str(SHIPPED_DATA)), DataConfig(), ArtifactStore(tmp_path / "a")
    )
    assert again.fingerprint == manifest.fingerprint
    for name in ("train", "eval", "database"):
        assert store.read_bytes(getattr(manifest, name)) == ArtifactStore(
            tmp_path / "a"
        ).read_bytes(getattr(again, name))
    other = prepare_data(
        fingerprint_source(str(SHIPPED_DATA)),
        DataConfig(prep_seed=1),
        ArtifactStore(tmp_path / "b"),
    )
    assert other.fingerprint != manifest.fingerprint


def test_source_fingerprint_follows_content_not_location(olist_copy: Path) -> None:
    assert (
        fingerprint_source(str(olist_copy)).fingerprint
        == fingerprint_source(str(SHIPPED_DATA)).fingerprint
    )
    with (olist_copy / "olist_sellers_dataset.csv").open("a", encoding="utf-8") as handle:
        handle.write("ffffffffffffffffffffffffffffffff,01001,sao paulo,SP\n")
    assert (
        fingerprint_source(str(olist_copy)).fingerprint
        != fingerprint_source(str(SHIPPED_DATA)).fingerprint
    )


def _olist_as_of(cutoff: str, target: Path) -> Path:
    """The shipped tables as they stood at `cutoff`: the orders purchased before it and every
    row that belongs to them (products, sellers and categories whole, as a catalogue is)."""
    import pandas as pd

    def read(name: str) -> pd.DataFrame:
        return pd.read_csv(SHIPPED_DATA / name, dtype=str, keep_default_na=False)

    target.mkdir()
    orders = read("olist_orders_dataset.csv")
    orders = orders[orders["order_purchase_timestamp"] < cutoff]
    kept = {"order_id": set(orders["order_id"]), "customer_id": set(orders["customer_id"])}
    for file in SHIPPED_DATA.glob("*.csv"):
        table = read(file.name) if file.name != "olist_orders_dataset.csv" else orders
        for key, values in kept.items():
            if key in table.columns and file.name != "olist_products_dataset.csv":
                table = table[table[key].isin(values)]
        table.to_csv(target / file.name, index=False)
    return target


def test_growing_data_never_moves_a_train_prompt_into_eval(tmp_path: Path) -> None:
    """Scheduled retraining preps the grown data and scores the champion on the new eval split:
    nothing the champion trained on (order, SQL question, data summary) may be in it."""
    config = DataConfig(train_size=600)

    def prepared_splits(data: Path, store: ArtifactStore) -> tuple[list[dict], list[dict]]:
        manifest = prepare_data(fingerprint_source(str(data)), config, store)
        return store.read_jsonl(manifest.train), store.read_jsonl(manifest.eval)

    old_train, old_eval = prepared_splits(
        _olist_as_of("2018-02-01", tmp_path / "olist-2018-01"), ArtifactStore(tmp_path / "a")
    )
    new_train, new_eval = prepared_splits(SHIPPED_DATA, ArtifactStore(tmp_path / "b"))

    def orders(rows: list[dict]) -> set[str]:
        return {r["order_id"] for r in rows if r["order_id"]}

    def ids(rows: list[dict]) -> set[str]:
        return {r["prompt_id"] for r in rows}

    assert len(orders(old_train)) == 300 and len(new_eval) == 65
    assert orders(new_eval) - orders(old_eval), "the grown eval split takes in new orders"
    assert not orders(old_train) & orders(new_eval)
    assert not ids(old_train) & ids(new_eval)  # SQL questions and summary slices too
    assert not orders(old_eval) & orders(new_train)  # an eval order stays eval


def test_the_last_months_orders_give_no_prompt(prepared, tmp_path: Path) -> None:
    """`data.unseen_months` leaves the data's last months to `tucano analyze`, unseen: no
    extraction or push prompt of either split is an order purchased in them (the shipped data
    ends in June 2018), where without it their orders are dealt like any other; so many months
    that too few reviews are left says so by name."""

    def purchased_from(store: ArtifactStore, manifest, month: str) -> int:
        rows = store.read_jsonl(manifest.train) + store.read_jsonl(manifest.eval)
        ids = ",".join(f"'{r['order_id']}'" for r in rows if r["order_id"])
        database = Path(store.path(manifest.database))
        ((count,),) = query(
            database,
            f"SELECT COUNT(*) FROM orders WHERE order_id IN ({ids}) "
            f"AND order_purchase_timestamp >= '{month}'",
        )
        return count

    assert purchased_from(*prepared, "2018-06-01") > 0
    store = ArtifactStore(tmp_path / "cut")
    source = fingerprint_source(str(SHIPPED_DATA))
    manifest = prepare_data(source, DataConfig(unseen_months=2), store)
    assert manifest.counts == prepared[1].counts
    assert purchased_from(store, manifest, "2018-05-01") == 0
    assert purchased_from(store, manifest, "2018-04-01") > 0
    with pytest.raises(
        DataTooSmall, match=r"purchased before 2017-07-01 \(data.unseen_months: 12\)"
    ):
        prepare_data(source, DataConfig(unseen_months=12), ArtifactStore(tmp_path / "year"))


def test_an_empty_cell_is_null_in_the_database_and_never_a_question(prepared) -> None:
    """Pandas reads text as its string dtype; an empty category must not become a value that
    questions are asked about ("Quantos itens da categoria  foram vendidos...?")."""
    store, manifest = prepared
    database = Path(store.path(manifest.database))
    assert query(database, "SELECT COUNT(*) FROM products WHERE product_category_name = ''") == [
        [0]
    ]
    for row in _rows(prepared, "train") + _rows(prepared, "eval"):
        if row["task"] == "sql_qa":
            assert "  " not in row["question"] and "= ''" not in row["gold_sql"], row["question"]


def test_named_extraction_instructions_shorten_only_the_system_message(
    prepared, tmp_path: Path
) -> None:
    """`data.extraction_instructions: named` names the fields in their order instead of
    describing each: the same prompts otherwise, and `tucano analyze` asks as the recipe says."""
    from rewards.extraction import FIELDS
    from tasks.prep.extraction import SYSTEM
    from tasks.production.analyze import review_prompts

    store, described = prepared
    named = prepare_data(
        fingerprint_source(str(SHIPPED_DATA)),
        DataConfig(extraction_instructions="named"),
        ArtifactStore(tmp_path),
    )
    assert named.fingerprint != described.fingerprint
    before = store.read_jsonl(described.train)
    after = ArtifactStore(tmp_path).read_jsonl(named.train)
    for old, new in zip(before, after, strict=True):
        system = new["prompt"][0]["content"]
        if new["task"] == "extraction":
            assert system == SYSTEM["named"] and len(system) < len(SYSTEM["described"]) / 3
            assert [system.index(f'"{name}"') for name in FIELDS] == sorted(
                system.index(f'"{name}"') for name in FIELDS
            )
        else:
            assert system == old["prompt"][0]["content"]
        assert {**new, "prompt": None} == {**old, "prompt": None}
        assert new["prompt"][1:] == old["prompt"][1:]
    production = review_prompts(str(SHIPPED_DATA), "named")
    assert {row["prompt"][0]["content"] for row in production} == {SYSTEM["named"]}


def test_the_eval_split_judges_insights_on_distinct_summaries(prepared) -> None:
    """Each summary is asked with one focus before any is asked with a second: the eval split's
    15 insights prompts are 15 tables where the data has them (it once held 3, five focuses
    each)."""
    from tasks.prep.insights import FOCUSES

    for split, rows in (("eval", _rows(prepared, "eval")), ("train", _rows(prepared, "train"))):
        insights = [row for row in rows if row["task"] == "insights"]
        summaries = {row["data_summary"] for row in insights}
        assert len(summaries) == min(len(insights), len(summaries)), split
        assert {row["analysis_focus"] for row in insights} <= set(FOCUSES.values())
    eval_insights = [row for row in _rows(prepared, "eval") if row["task"] == "insights"]
    assert len({row["data_summary"] for row in eval_insights}) == len(eval_insights)


def test_an_insights_reference_follows_its_focus_and_says_only_true_things(prepared) -> None:
    from rewards.insights import claims_of, focus_served
    from rewards.table_claims import parse_table

    for row in _rows(prepared, "train"):
        if row["task"] != "insights":
            continue
        claims = claims_of(row["reference"], row["data_summary"])
        assert claims and all(claim.true for claim in claims), (row["prompt_id"], claims)
        table = parse_table(row["data_summary"])
        assert table is not None
        assert focus_served(row["reference"], row["analysis_focus"], table) == 1.0, row["prompt_id"]


def test_push_prompts_span_the_customers_situations(prepared) -> None:
    """Most orders are delivered to a happy customer; taken as drawn, 16 of 20 eval pushes were
    its two objectives. Taken a situation at a time, each has its share where the data has it."""
    from collections import Counter

    from rewards.push import OBJECTIVES

    for split in ("eval", "train"):
        pushes = [row for row in _rows(prepared, split) if row["task"] == "push"]
        situations = Counter(OBJECTIVES[row["push_objective"]].situation for row in pushes)
        assert len(situations) == 5, (split, situations)
        # a situation the split's orders run out of leaves its turns to the others
        assert max(situations.values()) <= -(-len(pushes) // 4), (split, situations)


def test_orders_are_taken_a_situation_at_a_time() -> None:
    import pandas as pd

    from tasks.prep.push import over_situations

    status = ["delivered"] * 6 + ["shipped", "canceled", "delivered", "delivered"]
    stars = [5, 5, 5, 4, 5, 1, None, None, None, 2]
    orders = pd.DataFrame({"order_status": status, "review_score": stars}, index=range(10, 20))
    taken = over_situations(orders, 6)
    # in transit, unhappy, unreviewed, happy, lost in turn (the objectives' order), then again
    # from the first situation with orders left
    assert list(taken.index) == [16, 15, 18, 10, 17, 19]
