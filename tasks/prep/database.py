"""The SQLite copy of the Olist tables: where gold SQL answers are computed, and later SQL runs."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pandas as pd

from tasks.prep.olist import TIMESTAMP_FORMAT


def build_database(tables: dict[str, pd.DataFrame], path: Path) -> None:
    """Write every table into a fresh SQLite file (one table per Olist CSV, same columns)."""
    path.unlink(missing_ok=True)
    with closing(sqlite3.connect(path)) as connection:
        for name, frame in tables.items():
            _to_sql_frame(frame).to_sql(name, connection, index=False)
        connection.executescript(
            """
            CREATE INDEX idx_orders_order ON orders(order_id);
            CREATE INDEX idx_orders_customer ON orders(customer_id);
            CREATE INDEX idx_items_order ON order_items(order_id);
            CREATE INDEX idx_items_product ON order_items(product_id);
            CREATE INDEX idx_payments_order ON order_payments(order_id);
            CREATE INDEX idx_reviews_order ON order_reviews(order_id);
            CREATE INDEX idx_customers_customer ON customers(customer_id);
            CREATE INDEX idx_products_product ON products(product_id);
            """
        )
        connection.commit()
        # VACUUM rewrites the pages in order, so the same tables give the same bytes.
        connection.execute("VACUUM")


def _to_sql_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Timestamps as SQLite-friendly text (NULL when absent), empty strings as NULL."""
    out = frame.copy()
    for column in out.columns:
        if pd.api.types.is_datetime64_any_dtype(out[column]):
            text = out[column].dt.strftime(TIMESTAMP_FORMAT)
            out[column] = text.where(out[column].notna(), None)
        elif pd.api.types.is_string_dtype(out[column]):
            # Object or pandas' own string dtype alike: an empty cell is no value, not a name
            # (a '' category would become a business question about "the category ''").
            out[column] = out[column].astype(object).where(out[column] != "", None)
    return out


def query(path: Path, sql: str) -> list[list[object]]:
    """Run one read-only query and return its rows as lists (JSON-friendly)."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
        return [list(row) for row in connection.execute(sql).fetchall()]
