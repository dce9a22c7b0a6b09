"""Reading the Olist CSVs with their schema checked, so bad input stops the run by name.

Every column is read as text first and then converted on purpose: a timestamp that does not parse,
a score out of range or an empty table is an error naming the file, the column and the record,
never a silent NaN that turns into a wrong gold answer three stages later.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping
from dataclasses import dataclass, field

import fsspec
import pandas as pd

from tasks.core.manifests import DataSource

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"


class OlistSchemaError(ValueError):
    """An Olist CSV that is missing, incomplete or malformed."""


@dataclass(frozen=True)
class TableSpec:
    file: str
    columns: tuple[str, ...]
    required_timestamps: tuple[str, ...] = ()
    optional_timestamps: tuple[str, ...] = ()
    integers: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    decimals: tuple[str, ...] = ()
    encoding: str = "utf-8"


TABLES: dict[str, TableSpec] = {
    "orders": TableSpec(
        "olist_orders_dataset.csv",
        (
            "order_id",
            "customer_id",
            "order_status",
            "order_purchase_timestamp",
            "order_approved_at",
            "order_delivered_carrier_date",
            "order_delivered_customer_date",
            "order_estimated_delivery_date",
        ),
        required_timestamps=("order_purchase_timestamp", "order_estimated_delivery_date"),
        # Undelivered orders legitimately have no approval or delivery dates.
        optional_timestamps=(
            "order_approved_at",
            "order_delivered_carrier_date",
            "order_delivered_customer_date",
        ),
    ),
    "order_items": TableSpec(
        "olist_order_items_dataset.csv",
        (
            "order_id",
            "order_item_id",
            "product_id",
            "seller_id",
            "shipping_limit_date",
            "price",
            "freight_value",
        ),
        required_timestamps=("shipping_limit_date",),
        integers={"order_item_id": (1, 10_000)},
        decimals=("price", "freight_value"),
    ),
    "order_payments": TableSpec(
        "olist_order_payments_dataset.csv",
        ("order_id", "payment_sequential", "payment_type", "payment_installments", "payment_value"),
        integers={"payment_sequential": (1, 10_000), "payment_installments": (0, 1_000)},
        decimals=("payment_value",),
    ),
    "order_reviews": TableSpec(
        "olist_order_reviews_dataset.csv",
        (
            "review_id",
            "order_id",
            "review_score",
            "review_comment_title",
            "review_comment_message",
            "review_creation_date",
            "review_answer_timestamp",
        ),
        required_timestamps=("review_creation_date", "review_answer_timestamp"),
        integers={"review_score": (1, 5)},
    ),
    "customers": TableSpec(
        "olist_customers_dataset.csv",
        (
            "customer_id",
            "customer_unique_id",
            "customer_zip_code_prefix",
            "customer_city",
            "customer_state",
        ),
    ),
    "products": TableSpec(
        "olist_products_dataset.csv",
        (
            "product_id",
            "product_category_name",
            "product_name_lenght",
            "product_description_lenght",
            "product_photos_qty",
            "product_weight_g",
            "product_length_cm",
            "product_height_cm",
            "product_width_cm",
        ),
    ),
    "sellers": TableSpec(
        "olist_sellers_dataset.csv",
        ("seller_id", "seller_zip_code_prefix", "seller_city", "seller_state"),
    ),
    "category_translation": TableSpec(
        "product_category_name_translation.csv",
        ("product_category_name", "product_category_name_english"),
        # The official file starts with a UTF-8 byte-order mark.
        encoding="utf-8-sig",
    ),
}


def _join(uri: str, name: str) -> str:
    return f"{uri.rstrip('/')}/{name}"


def fingerprint_source(uri: str) -> DataSource:
    """Digest every table's bytes; a missing file is an error naming it."""
    files: dict[str, str] = {}
    for spec in TABLES.values():
        files[spec.file] = hashlib.sha256(_read_bytes(uri, spec.file)).hexdigest()
    overall = hashlib.sha256("".join(f"{k}={v};" for k, v in sorted(files.items())).encode())
    return DataSource(fingerprint=overall.hexdigest(), uri=uri, files=files)


def tables_present(uri: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """Those of the named tables whose file is in the folder at `uri`."""
    filesystem, root = fsspec.core.url_to_fs(uri)
    return tuple(name for name in names if filesystem.exists(_join(root, TABLES[name].file)))


def _read_bytes(uri: str, name: str) -> bytes:
    path = _join(uri, name)
    try:
        with fsspec.open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError as exc:
        raise OlistSchemaError(f"{path}: file not found (the Olist folder needs {name})") from exc


def load_tables(source: DataSource) -> dict[str, pd.DataFrame]:
    """Read and check every table of the source; typed columns come back converted."""
    return read_tables(source.uri, tuple(TABLES))


def read_tables(uri: str, names: tuple[str, ...]) -> dict[str, pd.DataFrame]:
    """Read and check the named tables of the Olist folder at `uri`."""
    return {name: _load_table(uri, TABLES[name]) for name in names}


def _load_table(uri: str, spec: TableSpec) -> pd.DataFrame:
    path = _join(uri, spec.file)
    raw = _read_bytes(uri, spec.file)
    try:
        frame = pd.read_csv(
            io.BytesIO(raw), dtype=str, keep_default_na=False, encoding=spec.encoding
        )
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
        raise OlistSchemaError(f"{path}: cannot be read as CSV: {exc}") from exc
    missing = [column for column in spec.columns if column not in frame.columns]
    if missing:
        raise OlistSchemaError(f"{path}: missing column(s) {missing}; found {list(frame.columns)}")
    if frame.empty:
        raise OlistSchemaError(f"{path}: table is empty (header only)")
    frame = frame[list(spec.columns)].copy()
    for column in spec.required_timestamps + spec.optional_timestamps:
        frame[column] = _parse_timestamps(
            path, frame[column], column, required=column in spec.required_timestamps
        )
    for column, (low, high) in spec.integers.items():
        frame[column] = _parse_integers(path, frame[column], column, low, high)
    for column in spec.decimals:
        frame[column] = _parse_decimals(path, frame[column], column)
    return frame


def _first_bad(path: str, column: str, values: pd.Series, bad: pd.Series, expected: str) -> None:
    if bad.any():
        position = int(bad.to_numpy().nonzero()[0][0])
        raise OlistSchemaError(
            f"{path}: column '{column}', row {position + 1} (record after the header): "
            f"{values.iloc[position]!r} is not {expected}"
        )


def _parse_timestamps(path: str, values: pd.Series, column: str, required: bool) -> pd.Series:
    parsed = pd.to_datetime(values, format=TIMESTAMP_FORMAT, errors="coerce")
    blank = values.str.strip() == ""
    bad = parsed.isna() if required else parsed.isna() & ~blank
    _first_bad(path, column, values, bad, f"a timestamp ({TIMESTAMP_FORMAT})")
    return parsed


def _parse_integers(path: str, values: pd.Series, column: str, low: int, high: int) -> pd.Series:
    numbers = pd.to_numeric(values, errors="coerce")
    bad = numbers.isna() | (numbers % 1 != 0) | (numbers < low) | (numbers > high)
    _first_bad(path, column, values, bad, f"an integer in [{low}, {high}]")
    return numbers.astype("int64")


def _parse_decimals(path: str, values: pd.Series, column: str) -> pd.Series:
    numbers = pd.to_numeric(values, errors="coerce")
    bad = numbers.isna() | (numbers < 0)
    _first_bad(path, column, values, bad, "a non-negative number")
    return numbers.astype("float64")
