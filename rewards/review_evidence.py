"""What a review says, read the way a Portuguese-speaking analyst reads it: the evidence an
extraction's judgement fields are checked against.

Each field gets an expected value and a weight: a cue the customer wrote ("não recebi", "veio
quebrado", "nunca mais compro", "recomendo") is strong evidence; what only the stars or the order's
dates say is weaker; no evidence at all still leans to "no problem" (a review that complains of
nothing has no issue), weakly. Portuguese negation is read: a cue one or two words after "não",
"sem", "nunca" or "nenhum" says the opposite ("sem defeito", "não demorou"), and cues that carry
their own negation ("não recebi", "não recomendo") are matched as phrases. Pure text rules over
accent-folded words (rewards/common.py), no model.
"""

from __future__ import annotations

from dataclasses import dataclass

from rewards.common import WORD, clauses_of, cues_said, fold

# Evidence weights: what the customer wrote > what the order's data or stars imply > silence.
STATED, IMPLIED, SILENT = 3.0, 1.0, 0.5

ISSUES = ("delivery_issue", "product_issue", "seller_issue")
# A customer whose words praise the purchase and name no problem had none with the product or the
# seller (a delivery is ruled out only by what is said of it, or by the order's dates). Were such
# a flag silence, it would cost next to nothing (0.97 of 1.00), and GRPO on SmolLM2 flagged a
# seller problem on 53 of 80 eval reviews to catch the 10 that state one (CHANGELOG.md).
RULED_OUT_BY_PRAISE = ("product_issue", "seller_issue")

# An order that never came is told many ways ("Cadê meu pedido?", "Produto não entregue",
# "Estou esperando o pedido"): a shorter list missed 44 of the 592 train reviews' delivery
# complaints and 7 of the 80 eval reviews', and read most of them as "no problem". Whole words
# where a prefix would catch praise: "cadê o pedido", not "cadeira"; "estou esperando", not "o
# que eu estava esperando".
DELIVERY_PROBLEM = (
    "nao receb", "nao cheg", "nao foi entregue", "nao entreg", "nao me foi entregue",
    "nunca chegou", "nunca recebi", "nao veio nada", "ainda nao", "atras", "demor", "extravi",
    "fora do prazo", "depois do prazo", "apos o prazo", "passou do prazo", "passou o prazo",
    "prazo vencido", "nao cumpr", "deveria ter cheg", "entrega errada", "aguardando", "aguardei",
    "aguardo receb", "aguardo entreg", "aguardo o produto", "estou esperando", "ainda esperando",
    "esperando o", "esperando meu", "esperando minha", "esperando a entrega", "cade meu",
    "cade minha", "cade o pedido", "cade o produto", "quero meu produto", "gostaria de receber",
    "preciso receber", "quero receber", "espero receber", "antes de receber", "ate agora nada",
    "nada de produto", "reenvi",
    # An order that came in part, empty, opened, or not to the customer: a missing item of
    # several is the delivery's (missing parts of one product are the product's, below).
    "faltando", "faltou", "recebi apenas", "recebi somente", "so recebi", "so chegou",
    "chegou apenas", "metade do", "caixa vazia", "veio vazia", "violad", "roubad",
    "outro endereco", "endereco errado", "outra pessoa", "carteiro", "nao sai do lugar",
    "o produto voltou", "voltou para", "chegasse", "postou",
)  # fmt: skip
DELIVERY_FINE = (
    "antes do prazo", "dentro do prazo", "no prazo", "chegou rapid", "entrega rapida",
    "entrega super rapida", "chegou antes", "entregue antes", "rapidez", "super rapid",
    "muito rapid", "chegou certinho", "bem rapid",
)  # fmt: skip
# Olist customers name a product problem by its kind (broken, wrong, poor), by what came instead
# ("entregaram outro", "difere do site") and by what it does ("pegou fogo", "não liga").
PRODUCT_PROBLEM = (
    "quebrad", "quebrou", "defeit", "danific", "avariad", "amassad", "rasgad", "estragad",
    "trincad", "rachad", "furad", "manchad", "enferruj", "descascand",
    "produto errado", "veio errado", "cor errada", "tamanho errado", "modelo errado",
    "diferente do anunciad", "diferente da foto", "diferente do que", "diferente do site",
    "diferente da imagem", "difere", "nao condiz", "nao corresponde", "nao e o mesmo",
    "nao e o que", "outro modelo", "modelo diferente", "cor diferente", "tamanho diferente",
    "veio outro", "veio outra", "entregaram outro", "enviaram outro", "mandaram outro",
    "recebi outro", "propaganda enganosa", "nao funciona", "parou de funcionar", "nao liga",
    "pegou fogo", "falsific", "nao e original", "faltando peca", "faltou peca", "incomplet",
    "veio sem", "qualidade ruim", "pessima qualidade", "baixa qualidade", "ma qualidade",
    "mal acabad", "mal costurad", "fragil", "produto ruim", "produto pessimo", "pessimo produto",
    "nao presta", "nao serve",
    # What a defect does and how a poor one looks or fits, in the words any product's buyer uses
    # (written from Portuguese, not from the audit sets: the reading missed half the product
    # complaints of the reviews it was not written from).
    "nao funcion", "parou de", "nao carreg", "nao acend", "nao encaix", "nao cab", "nao coub",
    "nao servi", "vazand", "vazou", "vazament", "arranhad", "riscad", "lascad", "torto", "torta",
    "empenad", "descol", "desbot", "soltou", "soltand", "descostur", "mofad", "podre",
    "apodrec", "mau cheiro", "cheiro forte", "inferior", "material ruim", "material fraco",
    "muito fino", "muito fina", "muito fraco", "muito fraca", "pequeno demais", "muito pequen",
    "produto usado", "veio usado", "replica", "imitacao", "pirata",
)  # fmt: skip
# The seller's part is most often told as what it did not do: answer, solve, refund, deliver
# the invoice, keep the order it took ("cancelaram", "esgotado").
SELLER_PROBLEM = (
    "vendedor nao", "loja nao", "nao responde", "nao respondem", "nao responderam",
    "nao respondeu", "nao me respond", "sem resposta", "nenhuma resposta", "nem resposta",
    "nem uma resposta", "nao tive resposta", "nao obtive", "sem retorno", "nenhum retorno",
    "nao tive retorno", "nao tive nenhum", "nem satisfacao", "nenhuma satisfacao",
    "sem satisfacao", "nem sequer uma", "nem sequer respond", "nem sequer ligaram",
    "nem sequer deram", "nao da satisfacao", "nao dao satisfacao",
    "ninguem atende", "ninguem responde", "nao atende", "nao consigo contato",
    "nao consigo falar", "nao consigo contat", "nao consegui contat", "nao consegui falar",
    "nao consigo nunca", "dificuldade em contat", "dificuldade de contat",
    "dificuldade em contact", "falta de contato", "sem contato", "nao retorn", "nao ligaram",
    "nem ligaram", "inumeros emails", "varios emails",
    "solicitacao de resposta", "sem solucao", "nenhuma solucao", "nada foi resolvido",
    "nao foi resolvido", "nao resolveram", "nao resolvem", "descaso", "pessimo atendimento",
    "atendimento ruim", "atendimento pessimo", "falta de respeito", "desrespeito", "enganad",
    "golpe", "enrola", "promet", "promessa", "negaram", "mentir", "mentira", "nao devolveram",
    "nao reembols", "estorno", "dinheiro de volta", "devolucao do dinheiro",
    "devolucao do meu dinheiro", "restituid", "ressarc", "cancelaram", "cancelado pela",
    "cancelada pela", "cancelou meu", "esgotad", "sem estoque", "nao tinha no estoque",
    "nao tinha estoque", "falta de estoque", "fora de estoque", "nota fiscal", "cobrad",
    "cobranc", "pessimo parceiro", "pessimo compromisso", "falta de compromisso",
    "pessima loja", "pessimo vendedor", "pessimo servico",
)  # fmt: skip
# What the seller did not give, told as its absence: "não tive retorno", "nem dão retorno",
# "não foi trocado", "nem ... resolveram", "não deram nenhuma satisfação". Counted only under a
# negation, since the same words praise a seller that gave them ("tive retorno rápido", "fácil
# de trocar"), which the cues above, counted either way, could not carry.
SELLER_NOT_GIVEN = (
    "retorn", "respond", "respost", "satisfac", "contat", "atend", "troca", "estorn", "reembols",
    "ressarc", "devolveram", "devolvem", "devolveu", "devolvid", "resolv", "soluc", "explica",
    "posicion", "comprometimento",
)  # fmt: skip
WONT_RECOMMEND = (
    "nao recomendo", "nao recomendaria", "nunca mais compro", "nao compro mais", "nao comprem",
    "nao compre", "evitem", "nunca mais", "nao voltarei", "nao indico",
)  # fmt: skip
RECOMMEND = ("recomendo", "recomendaria", "indico", "compraria de novo", "comprarei novamente")
WILL_RETURN = (
    "comprarei novamente", "comprarei de novo", "voltarei a comprar", "compraria novamente",
    "compraria de novo", "sempre compro", "com certeza comprarei", "vou comprar mais",
)  # fmt: skip
PRAISE = (
    "otimo", "otima", "excelente", "perfeito", "perfeita", "adorei", "amei", "gostei",
    "maravilh", "muito bom", "muito boa", "satisfeit", "parabens", "top", "show",
)  # fmt: skip

# Words of five letters or more say what a review is about, except those every review shares;
# compared by their first five letters, so that "atraso" says what "atrasou" does.
CONTENT_LETTERS = 5
SHARED_STEMS = frozenset({"clien", "produ", "compr", "pedid", "avali"})


def content_words(text: str) -> frozenset[str]:
    """The stems of a text's content words."""
    stems = (word[:CONTENT_LETTERS] for word in WORD.findall(fold(text)))
    return frozenset(stem for stem in stems if len(stem) == CONTENT_LETTERS) - SHARED_STEMS


@dataclass(frozen=True)
class Expected:
    """A field's expected value (a set where several are right), partial credit for a
    neighbouring one, and how much the evidence weighs."""

    right: frozenset[object]
    weight: float
    partly: frozenset[object] = frozenset()

    def credit(self, value: object) -> float:
        if isinstance(value, str):
            value = value.strip().lower()
        if value in self.right and type(value) is type(next(iter(self.right))):
            return 1.0
        return 0.5 if value in self.partly else 0.0


def _flag(value: bool, weight: float) -> Expected:
    return Expected(frozenset({value}), weight)


SENTIMENT_ORDER = ("negativo", "neutro", "positivo")
# The ends of the scale, where a review says plainly which way it goes.
EXTREME_STARS = (1, 5)


# The stars of each sentiment, in words, for what the checks and logs say.
STAR_GROUPS = {"negativo": "1-2", "neutro": "3", "positivo": "4-5"}


def star_sentiment(stars: int) -> str:
    """1-2 negativo, 3 neutro, 4-5 positivo."""
    return "positivo" if stars >= 4 else "neutro" if stars == 3 else "negativo"


@dataclass(frozen=True)
class Reading:
    """What a review says, as evidence per extraction field."""

    fields: dict[str, Expected]
    leans: str | None  # "negativo" or "positivo" where the text leans one way
    about: frozenset[str]  # the review's content words

    def summary_credit(self, summary: object) -> float | None:
        """1 when the summary says something of what this review says (a content word of it), 0
        for a summary that could belong to any review; None with no review text to hold it to."""
        if not self.about:
            return None
        return float(isinstance(summary, str) and bool(content_words(summary) & self.about))

    def stated_problems(self) -> list[str]:
        """The issues the customer wrote down, in so many words."""
        return [
            name
            for name in ISSUES
            if (expected := self.fields.get(name)) is not None
            and expected.weight == STATED
            and True in expected.right
        ]

    def missed(self, answer: dict[str, object]) -> list[str]:
        """What the answer hides of the complaint: each problem the customer wrote down that it
        says is not there, and a recommendation the review rules out."""
        denied = [name for name in self.stated_problems() if answer.get(name) is False]
        return denied + ["would_recommend"] * self.recommends_against_the_review(answer)

    def recommends_against_the_review(self, answer: dict[str, object]) -> bool:
        """A recommendation the review rules out (its words, or one or two stars). Weighed only
        as evidence, it cost too little: GRPO on SmolLM2 said one- and two-star customers would
        recommend the shop (49 of 51) to flag every issue instead (CHANGELOG.md)."""
        recommend = self.fields.get("would_recommend")
        return (
            recommend is not None
            and False in recommend.right
            and answer.get("would_recommend") is True
        )

    def invented(self, answer: dict[str, object]) -> list[str]:
        """Each problem the answer reports that the review rules out: the order's dates say it
        came on time, or the customer's words say all was well ("chegou antes do prazo", "sem
        defeito", praise that names no problem). Silence alone rules out nothing."""
        return [
            name
            for name in ISSUES
            if (expected := self.fields.get(name)) is not None
            and expected.weight >= IMPLIED
            and False in expected.right
            and answer.get(name) is True
        ]

    def expected(self, field: str, unsettled: object = None) -> object:
        """The value this reading expects of a field (the first, where several are right), or
        `unsettled` where the review settles nothing."""
        if field not in self.fields:
            return unsettled
        return sorted(self.fields[field].right, key=str)[0]

    def sentiment_credit(self, sentiment: object, stars: int) -> float:
        """1 for what the stars call for; half for a neighbour the text leans to (a 4-star review
        that complains may be neutral); a fifth for another neighbour, except on one or five stars,
        where nothing; 0 for the opposite. A one- or five-star review is never neutral by itself:
        a fifth there paid SmolLM2's GRPO for "neutro" to every review, a hedge that cannot be
        wrong by much and tells a retailer nothing."""
        if not isinstance(sentiment, str) or sentiment.strip().lower() not in SENTIMENT_ORDER:
            return 0.0
        given = SENTIMENT_ORDER.index(sentiment.strip().lower())
        expected = SENTIMENT_ORDER.index(star_sentiment(stars))
        if given == expected:
            return 1.0
        if abs(given - expected) == 2:
            return 0.0
        leans_there = (
            self.leans is not None
            and (SENTIMENT_ORDER.index(self.leans) - expected) * (given - expected) > 0
        )
        if leans_there:
            return 0.5
        return 0.0 if stars in EXTREME_STARS else 0.2


def opposite(sentiment: object, stars: int) -> bool:
    """Positivo on 1-2 stars, negativo on 4-5."""
    if not isinstance(sentiment, str) or sentiment.strip().lower() not in SENTIMENT_ORDER:
        return False
    given = SENTIMENT_ORDER.index(sentiment.strip().lower())
    return abs(given - SENTIMENT_ORDER.index(star_sentiment(stars))) == 2


def contradicts_itself(sentiment: object, sentiment_score: object) -> bool:
    """A sentiment no reader could give with the answer's own score: the opposite of it, or
    anything but its sentiment beside a 1 or a 5 ("sentiment_score": 1 with "neutro")."""
    if (
        not isinstance(sentiment, str)
        or sentiment.strip().lower() not in SENTIMENT_ORDER
        or not isinstance(sentiment_score, int)
        or isinstance(sentiment_score, bool)
        or not 1 <= sentiment_score <= 5
    ):
        return False
    if sentiment_score in EXTREME_STARS:
        return sentiment.strip().lower() != star_sentiment(sentiment_score)
    return opposite(sentiment, sentiment_score)


def _praise_rules_out(issue: str, all_well: bool) -> bool:
    return all_well and issue in RULED_OUT_BY_PRAISE


def read_review(text: str | None, stars: int | None, delivered_late: bool | None) -> Reading:
    clauses = clauses_of(text)
    late_said, on_time_by_negation = cues_said(clauses, DELIVERY_PROBLEM)
    fine_said, _ = cues_said(clauses, DELIVERY_FINE)
    broken, unbroken = cues_said(clauses, PRODUCT_PROBLEM)
    # Negation does not clear the seller: its failures are told as what it did not give ("nem o
    # ressarcimento", "nem a devolução do dinheiro"), so a seller cue counts negated or not.
    seller = any(cues_said(clauses, SELLER_PROBLEM)) or cues_said(clauses, SELLER_NOT_GIVEN)[1]
    wont, _ = cues_said(clauses, WONT_RECOMMEND)
    would, would_negated = cues_said(clauses, RECOMMEND)
    returns, _ = cues_said(clauses, WILL_RETURN)
    praised, _ = cues_said(clauses, PRAISE)

    if late_said:
        delivery = _flag(True, STATED)
    elif delivered_late:
        delivery = _flag(True, IMPLIED)
    elif fine_said or on_time_by_negation or delivered_late is False:
        delivery = _flag(False, IMPLIED)
    else:
        delivery = _flag(False, SILENT)
    negative = late_said or broken or seller or wont
    positive = fine_said or would or returns or praised
    all_well = positive and not negative
    fields = {
        "delivery_issue": delivery,
        "product_issue": _flag(True, STATED)
        if broken
        else _flag(
            False, IMPLIED if unbroken or _praise_rules_out("product_issue", all_well) else SILENT
        ),
        "seller_issue": _flag(True, STATED)
        if seller
        else _flag(False, IMPLIED if _praise_rules_out("seller_issue", all_well) else SILENT),
    }
    if wont or would_negated:
        fields["would_recommend"] = _flag(False, STATED)
    elif would:
        fields["would_recommend"] = _flag(True, STATED)
    elif stars is not None and stars != 3:
        fields["would_recommend"] = _flag(stars >= 4, IMPLIED)
    if wont:
        fields["churn_risk"] = Expected(frozenset({"alto"}), STATED, frozenset({"medio"}))
    elif returns:
        fields["churn_risk"] = Expected(frozenset({"baixo"}), STATED, frozenset({"medio"}))
    elif stars is not None:
        right, partly = {
            1: ({"alto"}, {"medio"}),
            2: ({"alto", "medio"}, set()),
            3: ({"medio"}, {"alto", "baixo"}),
            4: ({"baixo"}, {"medio"}),
            5: ({"baixo"}, {"medio"}),
        }[stars]
        fields["churn_risk"] = Expected(frozenset(right), IMPLIED, frozenset(partly))
    leans = "negativo" if negative and not positive else "positivo" if all_well else None
    return Reading(fields, leans, content_words(text or ""))
