"""Business question -> SQL + explanation. The seed's four tiers (V4.2.1).

Tier 1, SQL structure 0.30: at least three SQL keywords (proportional below three).
Tier 2, query + explanation 0.25: a SELECT ... FROM query and prose beside it.
Tier 3, concrete numbers 0.25: the explanation states numbers.
Tier 4, domain coherence 0.20: Portuguese business words (three distinct for full credit).
"""

from __future__ import annotations

import re
from typing import Any

from rewards.common import SCAN_LIMIT, Score, completion_text, distinct_hits, fold

W_STRUCTURE, W_QUERY_AND_EXPLANATION, W_NUMBERS, W_DOMAIN = 0.30, 0.25, 0.25, 0.20
KEYWORDS_FOR_FULL_STRUCTURE = 3
DOMAIN_WORDS_FOR_FULL_CREDIT = 3
# Prose outside the query must be a sentence or so, not a stray word.
MIN_EXPLANATION_WORDS = 6

SQL_KEYWORDS = (
    "select", "from", "where", "join", "group by", "order by", "having", "count", "sum",
    "avg", "limit", "distinct", "case when", "inner join", "left join", "round",
)  # fmt: skip
_KEYWORD_PATTERNS = [re.compile(r"\b" + kw.replace(" ", r"\s+") + r"\b") for kw in SQL_KEYWORDS]
_SELECT = re.compile(r"\bselect\b", re.IGNORECASE)
_FROM = re.compile(r"\bfrom\b", re.IGNORECASE)
_QUERY_END = re.compile(r";|```|\n\s*\n")
# A FROM this far after the SELECT no longer belongs to it.
MAX_SELECT_TO_FROM = 4_000
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")

# The seed's hotfix grew this list from 10 to 30 words after the audit showed SQL answers in good
# Portuguese scoring as off-topic. Stems, matched on accent-folded words.
DOMAIN_STEMS = (
    "pedido", "cliente", "venda", "vendedor", "produto", "categori", "entrega", "frete",
    "pagamento", "parcela", "avaliac", "nota", "receita", "faturamento", "ticket", "estado",
    "cidade", "prazo", "atraso", "compra", "preco", "valor", "media", "total", "taxa",
    "boleto", "cartao", "desconto", "estoque", "logistic",
)  # fmt: skip


def find_query(text: str) -> tuple[int, int] | None:
    """Span of the first SELECT ... FROM ... statement (to ';', a fence or a blank line)."""
    select = _SELECT.search(text)
    if select is None:
        return None
    from_ = _FROM.search(text, select.end(), select.end() + MAX_SELECT_TO_FROM)
    if from_ is None:
        return None
    end = _QUERY_END.search(text, from_.end())
    return select.start(), end.start() if end else len(text)


def score(completion: Any, **_: Any) -> Score:
    text = completion_text(completion)[:SCAN_LIMIT]
    lowered = text.lower()
    keywords = sum(1 for pattern in _KEYWORD_PATTERNS if pattern.search(lowered))
    query = find_query(text)
    prose = f"{text[: query[0]]} {text[query[1] :]}" if query else text
    prose_words = len(re.findall(r"[^\W\d_]{2,}", prose))
    components = {
        "structure": W_STRUCTURE
        * min(keywords, KEYWORDS_FOR_FULL_STRUCTURE)
        / KEYWORDS_FOR_FULL_STRUCTURE,
        "query_and_explanation": W_QUERY_AND_EXPLANATION
        if query and prose_words >= MIN_EXPLANATION_WORDS
        else 0.0,
        "numbers": W_NUMBERS if _NUMBER.search(prose) else 0.0,
        "domain": W_DOMAIN
        * min(distinct_hits(fold(prose), DOMAIN_STEMS), DOMAIN_WORDS_FOR_FULL_CREDIT)
        / DOMAIN_WORDS_FOR_FULL_CREDIT,
    }
    return Score(sum(components.values()), components)
