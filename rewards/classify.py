"""Guessing the task of an untyped completion, for scoring production logs only.

Pipeline rows carry their task and are never classified. This guess looks at form, not at
keywords: V4.2's classifier sent insights about "reengajamento" to the push reward because
the word appeared in its push keyword list, and 500-word analyses were scored against 120
characters.
"""

from __future__ import annotations

from rewards.common import SCAN_LIMIT
from rewards.extraction import FIELDS, parse_json_object
from rewards.push import ZERO_CREDIT_AT
from rewards.sql_qa import find_query

# An object with fewer schema keys than this is some other JSON, not an extraction.
MIN_SCHEMA_KEYS = 3


def classify(text: str) -> str:
    head = text[:SCAN_LIMIT].strip()
    data, _ = parse_json_object(head)
    if data is not None and len(set(data) & set(FIELDS)) >= MIN_SCHEMA_KEYS:
        return "extraction"
    if find_query(head) is not None:
        return "sql_qa"
    if len(head) < ZERO_CREDIT_AT and "\n" not in head:
        return "push"
    return "insights"
