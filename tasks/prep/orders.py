"""One row per order with what the per-order prompts need: customer, first item, review, dates."""

from __future__ import annotations

import pandas as pd


def order_view(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    orders = tables["orders"].merge(
        tables["customers"][["customer_id", "customer_city", "customer_state"]],
        on="customer_id",
        how="left",
    )
    items = tables["order_items"].merge(
        tables["products"][["product_id", "product_category_name"]], on="product_id", how="left"
    )
    # The first item names the order's category; the order's value is all its items.
    first_items = (
        items.sort_values(["order_id", "order_item_id"])
        .drop_duplicates("order_id")[["order_id", "product_category_name"]]
        .rename(columns={"product_category_name": "category"})
    )
    totals = items.groupby("order_id", as_index=False).agg(
        items_value=("price", "sum"),
        freight_value=("freight_value", "sum"),
        n_items=("price", "size"),
    )
    reviews = one_review_per_order(tables["order_reviews"])
    first_items["category"] = first_items["category"].fillna("")
    view = (
        orders.merge(first_items, on="order_id", how="inner")
        .merge(totals, on="order_id", how="inner")
        .merge(reviews, on="order_id", how="left")
    )
    delivered = view["order_delivered_customer_date"]
    view["delivered_late"] = (delivered > view["order_estimated_delivery_date"]).where(
        delivered.notna()
    )
    return view.sort_values("order_id").reset_index(drop=True)


def one_review_per_order(reviews: pd.DataFrame) -> pd.DataFrame:
    """The earliest review of each order. A review id shared by several orders is dropped, since
    the same text on two orders could land in train and eval at once."""
    shared = reviews["review_id"].duplicated(keep=False)
    unique = reviews[~shared].sort_values(["order_id", "review_creation_date", "review_id"])
    return unique.drop_duplicates("order_id")[
        ["order_id", "review_id", "review_score", "review_comment_title", "review_comment_message"]
    ]


def with_seller_and_payment(orders: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """The order view with the state of the first item's seller and the type of the order's
    largest payment: what the data summaries also slice by."""
    sellers = (
        tables["order_items"]
        .merge(tables["sellers"][["seller_id", "seller_state"]], on="seller_id", how="left")
        .sort_values(["order_id", "order_item_id"])
        .drop_duplicates("order_id")[["order_id", "seller_state"]]
    )
    payments = (
        tables["order_payments"]
        .sort_values(
            ["order_id", "payment_value", "payment_sequential"], ascending=[True, False, True]
        )
        .drop_duplicates("order_id")[["order_id", "payment_type"]]
    )
    return orders.merge(sellers, on="order_id", how="left").merge(
        payments, on="order_id", how="left"
    )
