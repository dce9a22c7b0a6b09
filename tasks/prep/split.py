"""Which side of the train/eval split a prompt's source is on, by a rule that ignores the rest of
the data.

The sources are orders (extraction and push prompts), SQL questions and data-summary slices. Each
one's side is decided by a hash of its own key alone, so when the data grows every earlier order,
question and slice stays on its side and new ones are dealt by the same rule: a model trained on
an earlier prep is never scored on prompts it trained on. Which prompts of each side are used
(the sizes in the recipe) is still drawn with `data.prep_seed`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")

# Part of the rule: changing it moves items between sides, which the retraining guard refuses.
SPLIT_SALT = b"tucano-split-v1\0"
_HASH_SCALE = 2.0**64


def eval_side(key: str, eval_share: float) -> bool:
    """True when the item named `key` may only ever be an eval prompt."""
    digest = hashlib.sha256(SPLIT_SALT + key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / _HASH_SCALE < eval_share


def partition(
    items: Iterable[T], key: Callable[[T], str], eval_share: float
) -> tuple[list[T], list[T]]:
    """(eval side, train side), each in the order the items came."""
    eval_items: list[T] = []
    train_items: list[T] = []
    for item in items:
        (eval_items if eval_side(key(item), eval_share) else train_items).append(item)
    return eval_items, train_items
