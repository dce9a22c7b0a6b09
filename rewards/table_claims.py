"""What an analysis claims about its data summary's table, and whether each claim is true.

A data summary holds one markdown table: a group per row (a state, a category, a month), a
metric per column (orders, average ticket, freight, late share, average rating, ...). An analysis
makes claims about those groups, and a retailer acts on them, so each is read and held to the
table:

- a superlative: "RJ tem o maior atraso", "o pior frete é o de PE", "SP concentra o volume",
  "SP e MG têm os maiores tickets" (each named group among the top as many as are named);
- a comparison: "RJ atrasa mais que SP", "a nota de PE é menor do que a de SP";
- a value: a number written beside a group must be that group's, in the column it names or any
  of its own ("RJ: 18,2% de atraso"), or its share of the table's orders ("SP concentra 32% dos
  pedidos"); a number that is another group's, or nobody's, is false.

A claim under a negation ("SP não tem o maior atraso") says the opposite. A number inside a
recommendation that is not the group's own ("reduzir o atraso de RJ para 10%") is a target, not a
claim, and neither are counts of things ("3 estados", "90 dias"). Pure text rules over
accent-folded words, no model: a sentence the rules cannot read makes no claim, true or false.
"""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace

from rewards.numbers import (
    DATE,
    NUMBER,
    Reading,
    WrittenNumber,
    agrees,
    number_readings,
    number_spans,
)

# What a column (or the answer's words) measures, by folded word prefixes. A header none of
# these names is a metric of its own, named by its first word.
METRIC_WORDS: dict[str, tuple[str, ...]] = {
    "orders": (
        "pedido",
        "volume",
        "venda",
        "vende$",
        "vendem",
        "vendeu",
        "iten",
        "quantidade",
        "demanda",
    ),
    "ticket": ("ticket", "valor medio", "gasto medio", "preco medio"),
    "freight": ("frete",),
    "late": ("atras", "pontual"),
    "rating": ("nota", "avaliac", "avaliad", "satisf", "insatisf"),
    "revenue": ("receita", "faturament"),
}
# A header is read by its own words, which are fewer: "valor" alone is no ticket in an answer.
HEADER_WORDS: dict[str, tuple[str, ...]] = {
    "orders": ("pedido", "venda", "volume", "iten", "qtd", "quantidade"),
    "ticket": ("ticket", "valor medio", "preco medio", "gasto medio"),
    "freight": ("frete",),
    "late": ("atras",),
    "rating": ("nota", "avaliac"),
    "revenue": ("receita", "faturament"),
}
# Words that name the metric's opposite: the most punctual group is the least late one, the
# most dissatisfied the lowest rated, the cheapest the lowest ticket.
INVERSE_WORDS = ("pontual", "insatisf")
# Where a bigger value is worse: "o pior atraso" is the largest, "a pior nota" the smallest.
WORSE_WHEN_HIGHER = {"late": True, "freight": True, "rating": False, "ticket": None}

MAX, MIN = "max", "min"
# Superlative and comparative cues, folded, with the direction they point to.
DIRECTION_CUES: dict[str, str] = {
    "maior": MAX, "maiores": MAX, "mais": MAX, "lider": MAX, "lidera": MAX, "lideram": MAX,
    "topo": MAX, "maximo": MAX, "maxima": MAX, "recorde": MAX, "superior": MAX, "acima": MAX,
    "concentra": MAX, "concentram": MAX,
    "menor": MIN, "menores": MIN, "menos": MIN, "minimo": MIN, "minima": MIN,
    "inferior": MIN, "abaixo": MIN,
}  # fmt: skip
# "mais alto", "mais baixa": the adjective decides, not "mais".
# "o frete mais caro" is the highest freight, "o mais barato" the lowest.
HEIGHT_WORDS = {"alto": MAX, "alta": MAX, "altos": MAX, "altas": MAX, "elevad": MAX, "car": MAX,
                "baixo": MIN, "baixa": MIN, "baixos": MIN, "baixas": MIN, "barat": MIN}  # fmt: skip
QUALITY_CUES = {"pior": "worse", "piores": "worse", "melhor": "better", "melhores": "better"}
# Volume is what "concentra" and "lidera" speak of when they name no other metric.
DEFAULT_METRIC = {"concentra": "orders", "concentram": "orders", "lidera": "orders",
                  "lideram": "orders", "lider": "orders"}  # fmt: skip
# Words between a cue and its metric: "o maior [índice de] atraso", "atraso [é o] mais alto".
METRIC_REACH = 5
# "mais atrasado", "atrasa mais", "mais bem avaliado": the metric of "mais" is beside it.
ADVERB_REACH = 1
# "concentra 32% dos pedidos": a number this close after "concentra" makes it a share.
SHARE_REACH = 3
# "Um dos maiores atrasos" places its group among this many.
ONE_OF = 3
ORDINALS = {"segundo": 2, "segunda": 2, "terceiro": 3, "terceira": 3, "quarto": 4, "quarta": 4}
PREPOSITIONS = ("em", "no", "na", "nos", "nas", "de", "do", "da", "dos", "das", "para", "pro",
                "pra", "por", "pelo", "pela", "medio", "media")  # fmt: skip
LOCATIVE = ("em", "no", "na", "nos", "nas")
# "atraso de 14,8%", "14,8% de atraso": a number's metric is named this close to it.
NUMBER_REACH = 2
# Articles that make "maior", "pior" a superlative ("o maior", "a pior", "um dos maiores").
ARTICLES = ("o", "a", "os", "as", "do", "da", "dos", "das", "no", "na", "nos", "nas", "pelo",
            "pela", "ao")  # fmt: skip
ARTICLE_REACH = 2
# What may stand between a metric and its adjective in one noun phrase: "a nota média mais
# baixa".
NOUN_PHRASE = ("medio", "media", "mais", "menos", "bem")
# "O menor atraso entre os meses recentes": a superlative over a part of the table.
RESTRICTING = ("entre", "dentre", "exceto", "fora", "excluindo", "salvo", "alem", "depois",
               "apos", "recente", "recentes")  # fmt: skip
RESTRICTION_REACH = 5
# "a maior parte", "a maior fatia": most of something, not the first of the groups.
SHARE_OF = ("parte", "fatia", "parcela", "metade")
# A negation this many words before a cue turns the claim around.
NEGATION_REACH = 3
NEGATORS = ("nao", "nem", "nunca")
# "do que", "que": what makes a cue a comparison with the group after it.
THAN = ("que",)
# "mais que o triplo de SP": a group this many words after "que" is what is compared with.
OBJECT_REACH = 4
# "MG empata com RJ", "contra SP": the group just after these is compared with, not spoken of.
COMPARED_WITH = ("com", "contra", "versus", "vs", "frente", "comparado", "comparada")
# A number followed by one of these counts things or time, it is no value of the table.
COUNTED = (
    "estado", "categori", "mes", "meses", "dia", "semana", "ano", "hora", "grupo", "regio",
    "cidade", "acao", "acoe", "passo", "ponto", "vez", "vezes", "prioridad", "etapa", "frente",
    "trimestre", "pilar", "item", "medida",
)  # fmt: skip
# "abaixo de 6%": a target word this close before a number makes it a target.
TARGET_REACH = 2
# "entre R$ 26,50 e R$ 29,72": how far back "entre" opens a range.
RANGE_REACH = 5
# Words that make the number after them a target or a change, not a statement of the data.
TARGET_WORDS = ("para", "ate", "meta", "abaixo", "acima", "menos", "mais", "em", "reduzir")
# "Recomendo", "revisar": the words of a recommendation (V4.2's list); a sentence with one
# asks for something, and its numbers may be targets.
ACTION_STEMS = (
    "recomend",
    "sugir",
    "suger",
    "implement",
    "prioriz",
    "priorit",
    "melhor",
    "invest",
    "reduz",
    "aument",
    "otimiz",
    "revis",
    "negoci",
    "monitor",
    "expand",
    "ampli",
    "criar",
    "oferec",
    "focar",
    "foco",
    "ajust",
    "acompanh",
    "trein",
    "lanc",
    # The verbs of a plan beyond the V4.2 reports': "renegociar o SLA", "trocar a transportadora".
    "renegoci",
    "trocar",
    "troque",
    "rever",
    "usar",
    "replic",
    "cobrar",
    "cobre",
    "reforc",
    "corrig",
    "corrija",
    "testar",
    "avaliar",
    "mapear",
    "analisar",
    "crie",
    "manter",
    "mantenha",
    "levar",
    "comunic",
    "consider",
    "ofereca",
    "envie",
    "enviar",
    "ouvir",
)
# Where a sentence's parts meet: a comma before a word (not inside "14,8"), a semicolon, a
# dash, "mas", "enquanto", "porém", "embora".
_SUBCLAUSE = re.compile(r",\s|;|\s[-–—]\s|\b(?:mas|enquanto|porem|embora)\b")
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")
_TOKEN = re.compile(r"r\$|%|[a-z0-9]+(?:[_-][a-z0-9]+)*")
_CELL_SPLIT = re.compile(r"\s*\|\s*")
_SEPARATOR_CELL = re.compile(r"^:?-{2,}:?$")
_MISSING = ("", "—", "-", "–", "n/a", "na", "nan")
_TOTAL_ORDERS = re.compile(r"(\d[\d.]*)\s+pedidos")
# Payment types as Olist stores them and as an analysis writes them ("Débito", "no crédito").
ALIASES = {
    "credit_card": ("cartao de credito", "credito"),
    "debit_card": ("cartao de debito", "debito"),
    "cartao de credito": ("credito", "credit card"),
    "cartao de debito": ("debito", "debit card"),
}
# What joins a list of groups: "SP e MG", "São Paulo (6,0%) e Campinas".
LIST_GLUE = ("e", "%", "r$")
_MONTH_KEY = re.compile(r"(\d{4})-(\d{2})")
MONTHS_PT = (
    "janeiro", "fevereiro", "marco", "abril", "maio", "junho",
    "julho", "agosto", "setembro", "outubro", "novembro", "dezembro",
)  # fmt: skip
# Short group names that are also Portuguese words ("SE", "PA", "MA") are matched only as
# written in capitals, as the table writes them.
CODE_LETTERS = 3


@functools.lru_cache(maxsize=4096)
def fold_char(ch: str) -> str:
    """One character lower-cased without its accent, or itself where folding would change the
    text's length (positions in the folded text are those of the original)."""
    base = "".join(
        c for c in unicodedata.normalize("NFKD", ch.lower()) if not unicodedata.combining(c)
    )
    return base if len(base) == 1 else ch.lower()[:1] or ch


def fold_same_length(text: str) -> str:
    return "".join(fold_char(ch) for ch in text)


def metric_of_header(header: str) -> str:
    folded = fold_same_length(header).strip()
    for metric, words in HEADER_WORDS.items():
        if any(word in folded for word in words):
            return metric
    return folded.split()[0] if folded.split() else folded


@dataclass(frozen=True)
class Cell:
    value: float
    readings: frozenset[Reading]


@dataclass(frozen=True)
class Table:
    """A summary's table: the groups in order, each with its metrics' values."""

    label: str
    metrics: tuple[str, ...]
    rows: dict[str, dict[str, Cell]]
    # The orders of the whole slice, where the summary says so ("142 pedidos"), for shares.
    total_orders: float | None

    def values(self, metric: str) -> dict[str, float]:
        return {group: cells[metric].value for group, cells in self.rows.items() if metric in cells}


def _cell(text: str) -> Cell | None:
    """A table cell's number ("R$ 1.234,56", "14,8%", "2010"): a cell holds no date, so a year-like
    count is a count."""
    if text.strip().lower() in _MISSING:
        return None
    found = NUMBER.findall(text)
    if len(found) != 1:
        return None
    readings = number_readings(found[0])
    # A table written in Brazilian notation: "1.210" is 1210, "14,8" 14.8.
    preferred = number_readings(found[0].replace(".", "").replace(",", ".")) or readings
    return Cell(next(iter(preferred)).value, frozenset(readings))


def parse_table(summary: str) -> Table | None:
    """The first markdown table of the summary with a header, a separator and rows; None when
    it has none."""
    lines = [line.strip() for line in summary.splitlines()]
    for start, line in enumerate(lines[:-2]):
        if not (line.startswith("|") and lines[start + 1].startswith("|")):
            continue
        header = [c for c in _CELL_SPLIT.split(line.strip("|"))]
        separator = _CELL_SPLIT.split(lines[start + 1].strip("|"))
        if not all(_SEPARATOR_CELL.match(c.strip()) for c in separator) or len(header) < 2:
            continue
        metrics = tuple(metric_of_header(h) for h in header[1:])
        rows: dict[str, dict[str, Cell]] = {}
        for row_line in lines[start + 2 :]:
            if not row_line.startswith("|"):
                break
            cells = _CELL_SPLIT.split(row_line.strip("|"))
            if len(cells) != len(header) or not cells[0].strip():
                continue
            parsed = {
                m: c for m, text in zip(metrics, cells[1:], strict=True) if (c := _cell(text))
            }
            rows[cells[0].strip()] = parsed
        if not rows:
            return None
        total = _TOTAL_ORDERS.search(fold_same_length("\n".join(lines[:start])))
        total_orders = next(iter(number_readings(total.group(1)))).value if total else None
        return Table(header[0].strip(), metrics, rows, total_orders)
    return None


@dataclass(frozen=True)
class GroupName:
    """One way an answer may write a group, and whether it is matched as written (a code in
    capitals) or accent- and case-folded (a name)."""

    group: str
    pattern: re.Pattern[str]
    as_written: bool


def group_names(group: str) -> list[GroupName]:
    """How an answer may write a group: a code in capitals as the table does ("SP"); a name
    folded, its underscores as spaces ("cama mesa banho", "cama, mesa e banho"); a month as
    "2017-05", "05/2017" or "maio de 2017"."""
    if len(group) <= CODE_LETTERS and group.isupper():
        return [GroupName(group, re.compile(rf"(?<!\w){re.escape(group)}(?!\w)"), True)]
    folded = fold_same_length(group)
    month = _MONTH_KEY.fullmatch(folded)
    if month:
        year, number = month.groups()
        name = MONTHS_PT[int(number) - 1]
        patterns = (
            rf"(?<!\d){year}-{number}(?!\d)",
            rf"(?<!\d){number}/{year}(?!\d)",
            rf"\b{name}(?:\s+de|/)\s*{year}\b",
        )
        return [GroupName(group, re.compile(p), False) for p in patterns]
    names = []
    for name in (folded, *ALIASES.get(folded, ())):
        words = [w for w in re.split(r"[\s_\-]+", name) if w]
        joined = r"[\s_\-,]+(?:e\s+)?".join(re.escape(w) for w in words)
        names.append(GroupName(group, re.compile(rf"(?<!\w){joined}(?!\w)"), False))
    return names


def names_of(table: Table) -> list[GroupName]:
    """Every way the answer may name the table's groups; a month also by its name alone
    ("em março") where one row of the table is that month."""
    names = [name for group in table.rows for name in group_names(group)]
    months = [m for group in table.rows if (m := _MONTH_KEY.fullmatch(group))]
    by_name = Counter(month.group(2) for month in months)
    for month in months:
        if by_name[month.group(2)] == 1:
            name = MONTHS_PT[int(month.group(2)) - 1]
            pattern = re.compile(rf"\b{name}\b(?!\s+de\s+\d|/\d)")
            names.append(GroupName(month.group(), pattern, False))
    return names


@dataclass(frozen=True)
class Claim:
    """One statement about the table, whether it holds, and the words it was read from."""

    kind: str  # superlative | comparison | value
    groups: tuple[str, ...]
    metric: str
    true: bool
    words: str


@dataclass(frozen=True)
class _Token:
    start: int
    end: int
    text: str
    group: str | None = None
    number: WrittenNumber | None = None
    clause: int = 0  # which part of the sentence, between commas or "mas", "enquanto"


def _tokens(original: str, folded: str, names: list[GroupName]) -> list[_Token]:
    """The sentence as words, numbers and group mentions, in order."""
    taken = [False] * len(folded)

    def free(start: int, end: int) -> bool:
        if any(taken[start:end]):
            return False
        taken[start:end] = [True] * (end - start)
        return True

    found: list[_Token] = []
    for name in names:
        for match in name.pattern.finditer(original if name.as_written else folded):
            if free(match.start(), match.end()):
                found.append(_Token(match.start(), match.end(), match.group(), group=name.group))
    blanked = "".join(" " if taken[i] else ch for i, ch in enumerate(folded))
    for number in number_spans(blanked):
        if free(number.start, number.end):
            found.append(_Token(number.start, number.end, "", number=number))
    for match in _TOKEN.finditer(DATE.sub(lambda m: " " * len(m.group()), blanked)):
        if free(match.start(), match.end()):
            found.append(_Token(match.start(), match.end(), match.group()))
    cuts = [match.start() for match in _SUBCLAUSE.finditer(folded)]
    return [
        replace(token, clause=bisect.bisect_right(cuts, token.start))
        for token in sorted(found, key=lambda token: token.start)
    ]


def _metric_at(token: _Token, table: Table) -> tuple[str, bool] | None:
    """The metric a word names, if the table has it, and whether it names its opposite."""
    return _metric_named(token.text, table.metrics)


@functools.lru_cache(maxsize=16384)
def _metric_named(text: str, metrics: tuple[str, ...]) -> tuple[str, bool] | None:
    for metric, words in METRIC_WORDS.items():
        if any(w.endswith("$") and text == w[:-1] for w in words) and metric in metrics:
            return metric, False
        words = tuple(w for w in words if not w.endswith("$"))
        if metric in metrics and any(text.startswith(w.split()[0]) for w in words):
            if any(" " in w for w in words if text.startswith(w.split()[0])) and not any(
                text.startswith(w) for w in words if " " not in w
            ):
                continue  # a two-word name ("valor medio") is read by _two_word_metric
            return metric, text.startswith(INVERSE_WORDS)
    for metric in metrics:
        if metric not in METRIC_WORDS and metric and text.startswith(metric[:5]):
            return metric, False
    return None


def _two_word_metric(tokens: list[_Token], k: int, table: Table) -> tuple[str, bool] | None:
    if k + 1 >= len(tokens):
        return None
    pair = f"{tokens[k].text} {tokens[k + 1].text}"
    for metric, words in METRIC_WORDS.items():
        if metric in table.metrics and any(" " in w and pair.startswith(w) for w in words):
            return metric, False
    return None


def _metrics_in(tokens: list[_Token], table: Table) -> list[tuple[int, str, bool]]:
    found = []
    for k, token in enumerate(tokens):
        if token.group or token.number:
            continue
        named = _metric_at(token, table) or _two_word_metric(tokens, k, table)
        if named:
            found.append((k, *named))
    return found


def _direction(tokens: list[_Token], k: int) -> str | None:
    word = tokens[k].text
    if word in ("mais", "menos") and k + 1 < len(tokens):
        following = tokens[k + 1].text
        height = next((d for stem, d in HEIGHT_WORDS.items() if following.startswith(stem)), None)
        if height:
            return height if word == "mais" else (MIN if height == MAX else MAX)
    return DIRECTION_CUES.get(word)


def _negated(tokens: list[_Token], k: int) -> bool:
    return any(t.text in NEGATORS for t in tokens[max(0, k - NEGATION_REACH) : k])


def _words_between(tokens: list[_Token], a: int, b: int) -> int:
    """Words from a to b, numbers, signs and groups not counted ("atraso chega a 18,2%, o
    maior")."""
    return sum(
        1
        for t in tokens[min(a, b) + 1 : max(a, b)]
        if t.text[:1].isalpha() and t.text != "r$" and not t.group
    )


def _nearest_metric(
    metrics: list[tuple[int, str, bool]], k: int, tokens: list[_Token]
) -> tuple[int, str, bool] | None:
    """The metric a cue speaks of: the nearest within reach, with no group between a cue and a
    metric after it. On a tie, after it for "maior", "pior" ("o maior atraso"), before it for an
    adjective after "mais" ("a nota mais baixa", "o frete mais caro")."""
    height = k + 1 < len(tokens) and tokens[k + 1].text.startswith(tuple(HEIGHT_WORDS))
    # "mais" and "menos" are everywhere ("mais atenção à nota"): only a metric beside them counts.
    adverb = tokens[k].text in ("mais", "menos") and not height
    reach = ADVERB_REACH if adverb else METRIC_REACH
    after = [
        (_words_between(tokens, k, m[0]), not height, m)
        for m in metrics
        if m[0] > k and not any(t.group for t in tokens[k + 1 : m[0]])
    ]
    before = [(_words_between(tokens, m[0], k), height, m) for m in metrics if m[0] < k]
    near = [c for c in (*after, *before) if c[0] <= reach]
    return min(near, key=lambda c: (c[0], not c[1]))[2] if near else None


def _places(tokens: list[_Token], k: int, groups: int) -> tuple[int, int]:
    """The places (first, last, from 1) a superlative at k gives its groups: "o maior" the
    first, "o segundo maior" the second, "um dos maiores" any of the first ONE_OF, and several
    groups named together the first as many as they are."""
    words = [t.text for t in tokens[max(0, k - 2) : k]]
    if words and words[-1] in ORDINALS:
        place = ORDINALS[words[-1]]
        return place, place
    if words[-2:] in (["um", "dos"], ["uma", "das"]):
        return 1, ONE_OF
    return 1, max(1, groups)


def _in_places(
    table: Table, metric: str, direction: str, groups: tuple[str, ...], places: tuple[int, int]
) -> bool:
    """Whether every group's value is one the places hold, ties included."""
    values = table.values(metric)
    if any(g not in values for g in groups) or len(values) < 2:
        return False
    ordered = sorted(values.values(), reverse=direction == MAX)
    held = ordered[places[0] - 1 : min(len(ordered), places[1])]
    return bool(held) and all(min(held) <= values[g] <= max(held) for g in groups)


def _compared(tokens: list[_Token], j: int) -> bool:
    """Whether the group at j is what another is compared with ("mais que o triplo de SP",
    "maior do que a de SP"): the object of a comparison, not the subject of the sentence."""
    return any(t.text in THAN for t in tokens[max(0, j - OBJECT_REACH) : j]) or any(
        t.text in COMPARED_WITH for t in tokens[max(0, j - 2) : j]
    )


def _subject(tokens: list[_Token], k: int) -> tuple[str, ...]:
    """The group or groups a cue at k speaks of: in its part of the sentence, those named just
    before it ("SP e MG têm os maiores tickets"), passing over a group that is compared with,
    else the first named after it ("o maior atraso é o de RJ"); failing both, the nearest named
    before it in the sentence ("Novembro, o mês de maior volume, ...")."""
    clause = tokens[k].clause
    before = [j for j in range(k) if tokens[j].group and not _compared(tokens, j)]
    near = [j for j in before if tokens[j].clause == clause]
    after = [j for j in range(k + 1, len(tokens)) if tokens[j].group and tokens[j].clause == clause]
    if not near and after:
        return (tokens[after[0]].group,)  # type: ignore[return-value]
    if not before:
        later = next((t.group for t in tokens[k + 1 :] if t.group), None)
        return (later,) if later else ()
    return _group_list(tokens, (near or before)[-1])


def _group_list(tokens: list[_Token], last: int) -> tuple[str, ...]:
    """The groups named together up to the one at `last`: "SP e MG", "São Paulo (6,0%) e
    Campinas (6,6%)" (their values passed over)."""
    groups = [tokens[last].group]
    j = last - 1
    while j >= 0 and (tokens[j].group or tokens[j].number or tokens[j].text in LIST_GLUE):
        if tokens[j].group:
            groups.insert(0, tokens[j].group)
        j -= 1
    return tuple(dict.fromkeys(g for g in groups if g))


def _definite(tokens: list[_Token], k: int, metric_at: int | None) -> bool:
    """Whether a superlative adjective is said as one: an article before it ("o maior", "a
    nota mais baixa"), not a comparison left unfinished ("quando o atraso foi menor")."""
    # The metric's article counts where the adjective follows it directly ("a nota mais
    # baixa"), not across a verb ("o atraso foi menor").
    beside = (
        metric_at is not None
        and metric_at < k
        and all(t.text in NOUN_PHRASE for t in tokens[metric_at + 1 : k])
    )
    starts = [k, metric_at] if beside else [k]
    return any(
        t.text in ARTICLES
        for start in starts
        for t in tokens[max(0, start - ARTICLE_REACH) : start]
    )


def _restricted(tokens: list[_Token], k: int) -> bool:
    """ "O menor atraso entre os meses recentes": the highest of a part the table does not
    mark; "a maior parte dos atrasos": a share of a total the table does not hold. The reading
    cannot tell, so it claims nothing."""
    following = tokens[k + 1].text if k + 1 < len(tokens) else ""
    return following in SHARE_OF or any(
        t.text in RESTRICTING for t in tokens[k + 1 : k + 1 + RESTRICTION_REACH]
    )


def _direction_claims(
    tokens: list[_Token], table: Table, sentence: str, metrics: list[tuple[int, str, bool]]
) -> Iterator[Claim]:
    for k, token in enumerate(tokens):
        direction = _direction(tokens, k)
        quality = QUALITY_CUES.get(token.text)
        if direction is None and quality is None:
            continue
        if token.text in DEFAULT_METRIC and any(
            t.number for t in tokens[k + 1 : k + SHARE_REACH + 1]
        ):
            continue  # "SP concentra 32% dos pedidos": a share, read as a value
        named = _nearest_metric(metrics, k, tokens)
        metric, inverse = (named[1], named[2]) if named else (DEFAULT_METRIC.get(token.text), False)
        if metric is None or metric not in table.metrics:
            continue
        if quality is not None:
            higher_is_worse = WORSE_WHEN_HIGHER.get(metric)
            if higher_is_worse is None:
                continue
            direction = MAX if (quality == "worse") == higher_is_worse else MIN
        if inverse:
            direction = MIN if direction == MAX else MAX
        than = next(
            (
                j
                for j in range(k + 1, min(len(tokens), k + METRIC_REACH + 3))
                if tokens[j].text in THAN
            ),
            None,
        )
        subject = _subject(tokens, k)
        if not subject:
            continue
        adjective = token.text not in DEFAULT_METRIC and (
            token.text not in ("mais", "menos")
            or _direction(tokens, k) != DIRECTION_CUES.get(token.text)
        )
        superlative = than is None
        if superlative and (
            _restricted(tokens, k) or (adjective and not _definite(tokens, k, named and named[0]))
        ):
            continue
        negated = _negated(tokens, k)
        other = next((t.group for t in tokens[than + 1 :] if t.group), None) if than else None
        values = table.values(metric)
        if other is not None and len(subject) == 1 and other != subject[0]:
            if subject[0] not in values or other not in values:
                continue
            a, b = values[subject[0]], values[other]
            holds = a > b if direction == MAX else a < b
            yield Claim("comparison", (subject[0], other), metric, holds != negated, sentence)
        elif than is None:
            holds = _in_places(table, metric, direction, subject, _places(tokens, k, len(subject)))
            yield Claim("superlative", subject, metric, holds != negated, sentence)


def _counts_things(tokens: list[_Token], k: int) -> bool:
    following = tokens[k + 1].text if k + 1 < len(tokens) else ""
    return following.startswith(COUNTED)


def _unit(tokens: list[_Token], k: int) -> str | None:
    if k > 0 and tokens[k - 1].text == "r$":
        return "money"
    if k + 1 < len(tokens) and tokens[k + 1].text == "%":
        return "percent"
    return None


def _share_of_orders(table: Table, group: str, readings: set[Reading]) -> bool:
    orders = table.values("orders")
    if group not in orders:
        return False
    totals = [t for t in (sum(orders.values()), table.total_orders) if t]
    return any(agrees(r, 100 * orders[group] / total) for r in readings for total in totals)


def _owner(tokens: list[_Token], k: int) -> str | None:
    """The group a number at k is written beside: in a list of values after a list of groups
    ("fevereiro e março (9,2% e 13,0%)"), the group in its place; the group just before it ("SP
    (4,1%)"); else the nearest in its part of the sentence, before or after it ("25% em
    novembro"), a group compared with passed over before it; else the nearest before it in the
    sentence."""
    respective = _respective(tokens, k)
    if respective is not None:
        return respective
    groups = [j for j, t in enumerate(tokens) if t.group]
    before = [j for j in groups if j < k]
    if before and _words_between(tokens, before[-1], k) == 0:
        return tokens[before[-1]].group
    clause = tokens[k].clause

    def leads_to(j: int) -> bool:
        """Only prepositions, a metric's words and more values lie between the number and the
        group after it: "25,0% em novembro", "18,2% de atraso no RJ", "4,1% e 4,2 em SP"."""
        between = tokens[k + 1 : j]
        return all(
            t.number is not None
            or not t.text[:1].isalpha()
            or t.text in (*PREPOSITIONS, "r$")
            or _names_a_metric(t.text)
            or (t.text == "e" and n + 1 < len(between) and between[n + 1].number is not None)
            for n, t in enumerate(between)
        )

    near = [
        j
        for j in groups
        if tokens[j].clause == clause
        and ((j > k and leads_to(j)) or (j < k and not _compared(tokens, j)))
    ]
    if near:
        # Nearest by words; on a tie the one before, unless the number says where it is
        # ("37,5% em março").
        located = next((t.text for t in tokens[k + 1 :] if t.text[:1].isalpha()), "") in LOCATIVE
        return tokens[
            min(near, key=lambda j: (_words_between(tokens, j, k), (j > k) != located))
        ].group
    # No group in its part of the sentence: the nearest before it that is not compared with
    # ("SP é o mercado principal: ..., mais que RJ e MG, com nota 3,7").
    subjects = [j for j in before if not _compared(tokens, j)]
    if subjects or before:
        return tokens[(subjects or before)[-1]].group
    return next((t.group for t in tokens[k + 1 :] if t.group), None)


def _run(tokens: list[_Token], start: int, step: int, kind: str) -> list[int]:
    """The positions of a list of groups (or numbers) from `start` going by `step`, its items
    joined by "e" (signs and "R$" passed over): "fevereiro e março", "9,2% e 13,0%"."""
    found, j = [], start
    while 0 <= j < len(tokens):
        token = tokens[j]
        if (token.group if kind == "group" else token.number) is not None:
            found.append(j)
        elif token.text not in ("e", "%", "r$"):
            break
        j += step
    return found if step > 0 else found[::-1]


def _respective(tokens: list[_Token], k: int) -> str | None:
    """The group of a number in a list of as many values right after a list of groups."""
    first = k
    while (first > 0 and tokens[first - 1].text in ("e", "%", "r$")) or (
        first > 0 and tokens[first - 1].number is not None
    ):
        first -= 1
    first = next(j for j in range(first, k + 1) if tokens[j].number is not None)
    numbers = _run(tokens, first, 1, "number")
    if k not in numbers:
        return None
    groups = [tokens[j].group for j in _run(tokens, first - 1, -1, "group")]
    if len(groups) != len(numbers):
        # "São Paulo e Campinas têm os fretes mais baratos (R$ 17,72 e R$ 16,48)": the values
        # of the groups named together before them.
        named = [j for j in range(first) if tokens[j].group]
        groups = list(_group_list(tokens, named[-1])) if named else []
    if len(groups) < 2 or len(groups) != len(numbers):
        return None
    return groups[numbers.index(k)]


def _in_range(tokens: list[_Token], k: int) -> bool:
    """ "Entre R$ 26,50 e R$ 29,72": the ends of a range, no group's value."""
    words = [t.text for t in tokens[max(0, k - RANGE_REACH) : k] if t.text not in ("%", "r$")]
    return bool(words) and (words[-1] == "entre" or (words[-1] == "e" and "entre" in words))


def _metric_of_number(
    metrics: list[tuple[int, str, bool]], k: int, tokens: list[_Token]
) -> str | None:
    """The metric a number at k is a value of: the one named just before it ("atraso de
    14,8%"), else just after it ("14,8% de atraso")."""
    before = [m for m in metrics if m[0] < k and _words_between(tokens, m[0], k) <= NUMBER_REACH]
    after = [m for m in metrics if m[0] > k and _words_between(tokens, k, m[0]) <= NUMBER_REACH]
    if before and not any(t.group or t.number for t in tokens[before[-1][0] + 1 : k]):
        return before[-1][1]
    return after[0][1] if after else None


def _names_a_metric(word: str) -> bool:
    return any(
        word.startswith(stem.split()[0]) for stems in METRIC_WORDS.values() for stem in stems
    )


def _value_claims(
    tokens: list[_Token],
    table: Table,
    sentence: str,
    metrics: list[tuple[int, str, bool]],
    asks: bool,
) -> Iterator[Claim]:
    for k, token in enumerate(tokens):
        if token.number is None or _counts_things(tokens, k) or _in_range(tokens, k):
            continue
        group = _owner(tokens, k)
        if group is None:
            continue
        readings = token.number.readings
        own = table.rows.get(group, {})
        metric = _metric_of_number(metrics, k, tokens)
        if metric in own and any(agrees(r, own[metric].value) for r in readings):
            yield Claim("value", (group,), metric, True, sentence)
            continue
        if _unit(tokens, k) == "percent" and _share_of_orders(table, group, readings):
            yield Claim("value", (group,), "orders", True, sentence)
            continue
        if table.total_orders and any(agrees(r, table.total_orders) for r in readings):
            continue  # "90 dos 228 pedidos": the slice's total, not the group's
        if any(agrees(r, cell.value) for cell in own.values() for r in readings):
            yield Claim("value", (group,), metric or "any", True, sentence)
            continue
        if any(t.text in TARGET_WORDS for t in tokens[max(0, k - TARGET_REACH) : k]):
            continue  # a target: "reduzir o atraso de RJ para 10%", "abaixo de 6%"
        compared = {
            tokens[j].group for j in range(len(tokens)) if tokens[j].group and _compared(tokens, j)
        }
        if any(
            agrees(r, cell.value)
            for g in compared
            for cell in table.rows.get(g, {}).values()
            for r in readings
        ):
            continue  # "mais que RJ e MG somados (68 cada)": the value of what it is compared with
        if asks and not any(
            agrees(r, cell.value)
            for cells in table.rows.values()
            for cell in cells.values()
            for r in readings
        ):
            continue  # a figure of the plan, not of the table
        yield Claim("value", (group,), metric or "any", False, sentence)


def _asks(folded: str) -> bool:
    words = re.findall(r"[a-z]+", folded)
    return any(word.startswith(ACTION_STEMS) for word in words)


def read_claims(text: str, table: Table) -> list[Claim]:
    """Every claim the text makes about the table's groups, sentence by sentence."""
    names = names_of(table)
    claims: list[Claim] = []
    for sentence in _SENTENCE.split(text):
        # A table row restates the data, it claims nothing of it.
        if not sentence.strip() or sentence.lstrip().startswith("|"):
            continue
        folded = fold_same_length(sentence)
        tokens = _tokens(sentence, folded, names)
        if not any(t.group for t in tokens):
            continue
        # "SP concentra o maior volume" says one thing, however many cues say it.
        metrics = _metrics_in(tokens, table)
        claims.extend(dict.fromkeys(_direction_claims(tokens, table, sentence.strip(), metrics)))
        claims.extend(_value_claims(tokens, table, sentence.strip(), metrics, _asks(folded)))
    return claims


def groups_named(text: str, table: Table) -> set[str]:
    """The table's groups the text names."""
    names = names_of(table)
    return {token.group for token in _tokens(text, fold_same_length(text), names) if token.group}


_NEXT_WORD = re.compile(r"\s*([a-z]+)")


def figures(text: str) -> list[set[Reading]]:
    """The readings of each number the text states as a figure: dates, list markers and counts
    of things or time ("3 estados", "90 dias") left out."""
    folded = fold_same_length(text)
    kept = []
    for number in number_spans(folded):
        following = _NEXT_WORD.match(folded, number.end)
        if not (following and following.group(1).startswith(COUNTED)):
            kept.append(number.readings)
    return kept


def targeted_actions(text: str, table: Table) -> int:
    """How many of the text's recommendations name a group of the table ("Revisar a logística
    de RJ"): advice the table shows where to take, not advice for any data."""
    names = names_of(table)
    count = 0
    for sentence in _SENTENCE.split(text):
        folded = fold_same_length(sentence)
        if _asks(folded) and any(t.group for t in _tokens(sentence, folded, names)):
            count += 1
    return count
