"""Bad input stops data prep with an error naming the file, the column and the row."""

from collections.abc import Callable
from pathlib import Path

import pytest

from configs.recipe import DataConfig
from tasks.core.store import ArtifactStore
from tasks.prep.build import prepare_data
from tasks.prep.olist import OlistSchemaError, fingerprint_source

ORDERS = "olist_orders_dataset.csv"
REVIEWS = "olist_order_reviews_dataset.csv"
ITEMS = "olist_order_items_dataset.csv"


def _edit(folder: Path, name: str, change: Callable[[list[str]], list[str]]) -> None:
    path = folder / name
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(change(lines)), encoding="utf-8")


def _replace_in_row(row: int, old: str, new: str) -> Callable[[list[str]], list[str]]:
    def change(lines: list[str]) -> list[str]:
        assert old in lines[row]
        lines[row] = lines[row].replace(old, new, 1)
        return lines

    return change


CASES = {
    "missing file": (
        lambda d: (d / ITEMS).unlink(),
        [ITEMS, "file not found"],
    ),
    "missing column": (
        lambda d: _edit(d, ORDERS, _replace_in_row(0, "order_status", "status")),
        [ORDERS, "missing column", "order_status"],
    ),
    "unparsable timestamp": (
        lambda d: _edit(d, ORDERS, _replace_in_row(3, "2017-", "2017/")),
        [ORDERS, "order_purchase_timestamp", "row 3", "timestamp"],
    ),
    "review score out of range": (
        lambda d: _edit(
            d, REVIEWS, lambda lines: [lines[0], lines[1].replace(",5,", ",7,", 1), *lines[2:]]
        ),
        [REVIEWS, "review_score", "row 1", "'7'"],
    ),
    "empty table": (
        lambda d: _edit(d, ITEMS, lambda lines: lines[:1]),
        [ITEMS, "empty"],
    ),
    "negative price": (
        lambda d: _edit(d, ITEMS, _replace_in_row(1, ",144.0,", ",-144.0,")),
        [ITEMS, "price", "row 1"],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_schema_error_names_the_problem_and_writes_nothing(
    olist_copy: Path, tmp_path: Path, case: str
) -> None:
    breaks, expected = CASES[case]
    breaks(olist_copy)
    store = ArtifactStore(tmp_path / "store")
    with pytest.raises(OlistSchemaError) as error:
        prepare_data(fingerprint_source(str(olist_copy)), DataConfig(), store)
    for fragment in expected:
        assert fragment in str(error.value)
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").rglob("*"))


def test_blank_optional_timestamps_are_allowed(olist_copy: Path) -> None:
    from tasks.prep.olist import load_tables

    tables = load_tables(fingerprint_source(str(olist_copy)))
    undelivered = tables["orders"]["order_delivered_customer_date"].isna().sum()
    assert undelivered > 0  # canceled and in-transit orders have no delivery date
    assert tables["orders"]["order_purchase_timestamp"].notna().all()
