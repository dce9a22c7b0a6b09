"""Context -> push notification of at most 120 characters. V4.2.1's rule, made to pay
for one sendable notification.

Length 0.50 up to 120 characters, decaying steeply to zero at 200 (the V4.2.1 hotfix: before it,
analytical essays about notifications still earned length credit). Portuguese markers 0.30,
creativity 0.20 (not a generic template), and -0.20 for formal-letter phrases. Beyond the V4.2
reports: the Portuguese and creativity credit is earned in proportion to the length credit (an
essay in good Portuguese about a notification is still no notification), and an answer of several
notifications (options on separate lines) keeps SEVERAL_KEEPS: someone still has to write the one
that is sent; one that a Brazilian customer would not read as a message (Spanish, shouting in
capitals, a string of hashtags) keeps UNSENDABLE_KEEPS.

A notification is sent for its objective (`push_objective`, one of OBJECTIVES, which data prep
draws from): each says what it needs said (the order on its way, the coupon, the apology and the
help, the request to review, the offer), and a notification that says none of it keeps
OFF_OBJECTIVE_KEEPS, one that says part of it proportionally more. The situation each objective
is for rules things out: praise-seeking with the unhappy customer, "chegou" for an order in
transit or cancelled; saying one keeps RULED_OUT_KEEPS. Cues are read as the review reader reads
them, negation included ("ainda não chegou" says no arrival). Without an objective (a log line
with no context) neither rule applies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rewards.common import (
    Score,
    clamp01,
    clauses_of,
    completion_text,
    cues_said,
    distinct_hits,
    fold,
)

W_LENGTH, W_PORTUGUESE, W_CREATIVITY = 0.50, 0.30, 0.20
# A cut notification is broken text on a customer's phone: it cannot be sent as it is.
CUT_KEEPS = 0.25
FORMAL_PENALTY = 0.20
SEVERAL_KEEPS = 0.5
UNSENDABLE_KEEPS = 0.25
# A notification that ignores its objective does not do the CRM's job, however well written; one
# that contradicts the customer's situation misinforms or hurts, and costs more.
OFF_OBJECTIVE_KEEPS = 0.4
RULED_OUT_KEEPS = 0.3
# A placeholder left in reaches the customer as brackets: as unsendable as a cut text.
PLACEHOLDER_KEEPS = 0.2
# A promise the shop cannot know it keeps (a deadline, a guarantee, a delivery date, a refund)
# turns into complaints when it is not kept.
UNBACKED_KEEPS = 0.4
# Sending the customer away ("não podemos fazer nada", "fale com os Correios") is the opposite
# of what any objective asks.
REFUSAL_KEEPS = 0.3
COMPONENTS = (
    "length", "portuguese", "creativity", "formal", "several", "unsendable", "placeholder",
    "unbacked", "refusal", "objective", "situation",
)  # fmt: skip
# Words and marks Spanish has and Portuguese does not: two of them make a Spanish message.
SPANISH = ("tu", "llego", "ahora", "gana", "cupon", "usted", "nuestro", "nuestra", "envio", "hoy",
           "gracias", "compra ya", "aprovecha", "descuentos", "el", "los", "ya")  # fmt: skip
SPANISH_MARKS = ("¡", "¿")
SPANISH_FOR_A_MESSAGE = 2
# Shouting: most of the letters in capitals (a word or two in capitals is emphasis).
SHOUTING_SHARE = 0.6
MIN_LETTERS_TO_SHOUT = 12
MAX_CHARS, ZERO_CREDIT_AT = 120, 200
# "Pedido enviado." is bland but a notification; one word is not.
MIN_WORDS = 2

PORTUGUESE_STEMS = (
    "voce", "seu", "sua", "para", "com", "nao", "sem", "frete", "oferta", "desconto",
    "pedido", "chegou", "aproveit", "confir", "agora", "hoje", "compra", "produto", "esta",
)  # fmt: skip
_ACCENTED = re.compile(r"[áàâãéêíóôõúç]", re.IGNORECASE)
GENERIC_PHRASES = (
    "confira nossas ofertas", "nao perca", "clique aqui", "ofertas imperdiveis",
    "promocao imperdivel", "aproveite agora", "acesse nosso site", "confira agora",
)  # fmt: skip
FORMAL_PHRASES = ("prezado", "prezada", "atenciosamente", "cordialmente", "caro cliente")
# A line with words on it: a notification of its own.
WORD_LINE = re.compile(r"[^\W\d_]{2,}")


# What each objective needs said: folded word-prefix phrases, any one of a group.
ON_ITS_WAY = (
    "a caminho", "saiu", "sai para", "enviad", "enviamos", "despach", "faturad", "em transito",
    "chegando", "chegara", "vai chegar", "postad", "em rota", "rastre", "segue", "esta indo",
    "transportadora",
)  # fmt: skip
# Reassurance, not a question about the deadline ("Dúvidas sobre o prazo?").
ON_TIME = (
    "no prazo", "dentro do prazo", "previs", "tranquil", "em breve", "chegara", "vai chegar",
    "chegando", "a caminho", "ja ja", "logo", "rastre", "acompanhe", "dentro do combinado",
    "segue para entrega",
)  # fmt: skip
# "Vale" alone is "worth it" ("vale a pena"); a voucher is "vale-compra", "vale-presente".
COUPON = (
    "cupom", "codigo", "desconto", "off", "vale compra", "vale presente", "vale desconto",
    "voucher", "credito", "cashback",
)  # fmt: skip
APOLOGY = (
    "desculp", "sentimos muito", "lamentamos", "lamento", "perdao", "perdoe", "sinto muito",
    "sentimos pel",
)  # fmt: skip
HELP = (
    "ajud", "fale com", "fala com", "conte com", "atendimento", "resolv", "suporte",
    "estamos aqui", "responda", "chame", "chama a gente", "contato", "solucion", "whatsapp",
    "chat", "o que aconteceu", "o que houve", "troca", "devolu", "atender",
)  # fmt: skip
# A review is asked for, not mentioned: "avalie", "o que achou?", not "sua avaliação é
# importante" or "avaliar ajuda outros clientes".
REVIEW_REQUEST = (
    "avalie", "avaliem", "que tal avaliar", "pode avaliar", "poderia avaliar", "ja avaliou",
    "deixe sua avaliacao", "deixe sua nota", "de sua nota", "da sua nota", "de uma nota",
    "o que achou", "o que voce achou", "conta pra gente", "conte pra gente", "conta o que",
    "conte o que", "comente", "deixe seu comentario", "deixe sua opiniao", "sua opiniao",
    "gostou", "estrelas", "feedback",
    # A reminder asks too: "falta avaliar", "não esqueça de avaliar".
    "falta avaliar", "nao esqueca de avaliar", "lembre de avaliar", "lembre se de avaliar",
    "hora de avaliar", "vamos avaliar",
)  # fmt: skip
NEW_PURCHASE = (
    "novidade", "confira", "veja", "conheca", "descubra", "leve", "compre", "aproveit",
    "proxima compra", "combina", "lancamento", "chegaram", "colecao", "garanta", "escolha",
    "que tal", "olha", "complete", "renove", "repor", "novo", "nova", "novos", "novas",
)  # fmt: skip
FREE_SHIPPING = (
    "frete gratis", "frete gratuito", "frete zero", "sem frete", "sem custo de frete",
    "frete por nossa conta", "frete e por nossa conta", "entrega gratis", "entrega gratuita",
    "frete free", "frete 0", "zero de frete", "sem pagar frete",
)  # fmt: skip
OFFER = (
    *COUPON, "oferta", "frete gratis", "preco especial", "promoc", "brinde", "gratis", "exclusiv",
)  # fmt: skip
COME_BACK = (
    "volt", "sentimos sua falta", "saudade", "de volta", "retorn", "nova chance", "tente de novo",
    "que tal", "esperando por voce", "bora", *NEW_PURCHASE, *OFFER,
)  # fmt: skip
# A percentage is a discount however it is worded ("10% na próxima compra").
_PERCENT = re.compile(r"\d+\s*%")
# An offer is given to this customer, not advertised: "seu cupom", "use o código", "separamos um
# cupom", not "temos cupons e ofertas incríveis" or "Frete grátis? Temos!".
GIVEN = (
    "seu", "sua", "um cupom", "uma oferta", "use", "usar", "aplique", "ganh", "separamos",
    "liberamos", "preparamos", "reservamos", "pra voce", "para voce", "esperando voce",
    "esperando por voce", "te espera", "so pra voce", "proxima compra", "proximo pedido",
    "de presente", "codigo", "com o cupom", "por nossa conta", "voce", "em qualquer",
)  # fmt: skip
# A code or an amount makes an offer concrete: "VOLTA15", "15% OFF", "R$ 20".
_CONCRETE = re.compile(r"\b[A-Z]{3,}\d{1,3}\b|\d+\s*%|R\$\s*\d")

# What no prompt's data backs: a deadline, a guarantee, a delivery date or time, a refund. The
# customer takes each as the shop's word, and the shop may not keep it.
DEADLINE = (
    "so hoje", "somente hoje", "apenas hoje", "so ate", "valido ate", "valido so", "so vale",
    "ate meia noite", "ate amanha", "ate domingo", "ate segunda", "ate sexta", "ate sabado",
    "ultimas horas", "ultimo dia", "ultimos dias", "por tempo limitado", "termina hoje",
    "acaba hoje", "so nesta semana", "so esta semana", "so neste fim de semana", "corre que",
)  # fmt: skip
GUARANTEE = (
    "garantia",
    "garantimos",
    "garantido",
    "garantida",
    "garantir que",
    "com certeza chega",
)
REFUND = (
    "reembols", "devolvemos seu dinheiro", "devolvemos o seu dinheiro", "devolvemos o valor",
    "dinheiro de volta", "estorn", "devolucao do valor", "devolucao do dinheiro",
)  # fmt: skip
_WEEKDAY = r"(?:segunda|terca|quarta|quinta|sexta|sabado|domingo)"
# "Chega amanhã", "entrega em 24h", "até sexta", "às 18h": a delivery date or time.
_WHEN = (
    rf"amanha|hoje|ate (?:o dia|dia|{_WEEKDAY}|\d)|em (?:ate )?\d+\s*(?:h\b|hora|dia|minuto)"
    rf"|{_WEEKDAY}|\d{{1,2}}/\d{{1,2}}|\d{{1,2}}\s*h\b"
)
_DELIVERY_TIME = re.compile(
    rf"\b(?:cheg|entreg|receb|sai)\w*\b(?:\W+\w+){{0,3}}?\W+(?:{_WHEN})"
    r"|\bem (?:ate )?\d+\s*(?:h|horas)\b|\bas \d{1,2}\s*h\b"
)
# A refusal where the notification is to help: the customer is sent away.
REFUSAL = (
    "nao podemos", "nao e possivel", "nao temos informac", "nao temos como", "nao conseguimos",
    "nada a fazer", "nada podemos", "nao ha o que", "nao ha como", "consulte os correios",
    "consulte a transportadora", "fale com os correios", "fale com a transportadora",
    "contato com a transportadora", "contato com os correios", "procure a transportadora",
    "procure os correios", "nao com a gente", "nao e com a gente", "nao e responsabilidade",
    "nao nos responsabiliz",
)  # fmt: skip
# A template sent as it is: "{nome}", "{{first_name}}", "[CIDADE]", "<produto>", "XX% off".
_PLACEHOLDER = re.compile(
    r"\{\{?\s*[\w.]+\s*\}?\}|\[[A-ZÀ-Ý_ ]{2,}\]|<\s*[A-Za-zÀ-ÿ_ ]{2,}\s*>"
    r"|\bX{2,}\b|\bXX\s*%|R\$\s*X+"
)


def offer_given(text: str) -> bool:
    """The offer is this customer's (a code, an amount, "seu cupom", "separamos"), not an
    advertisement of offers."""
    return _says(text, GIVEN) or bool(_CONCRETE.search(text))


def unbacked(text: str) -> bool:
    """A promise no prompt's data backs: a deadline, a guarantee, a delivery date or time, a
    refund."""
    folded = fold(text)
    return _says(text, (*DEADLINE, *GUARANTEE, *REFUND)) or bool(_DELIVERY_TIME.search(folded))


def refuses(text: str) -> bool:
    return _says(text, REFUSAL)


def placeholder(text: str) -> bool:
    return bool(_PLACEHOLDER.search(text))


# What each situation rules out.
ARRIVED = (
    "chegou", "foi entregue", "ja foi entregue", "entregamos", "recebeu", "recebido",
    "esta com voce", "em maos",
)  # fmt: skip
# "Chegou a hora de voltar" is an invitation, not an arrival.
_NOT_ARRIVAL = re.compile(r"\bchegou (?:a hora|o momento|a vez|o dia)\b")
PRAISE_SEEKING = (
    "o que achou", "avalie", "de sua nota", "estrelas", "gostou", "adorou", "amou",
    "curtiu", "aproveitando", "deixe sua avaliacao", "nos avalie", "recomende",
)  # fmt: skip
# Nothing received yet: nothing to review or enjoy.
NOT_RECEIVED = ("o que achou", "avalie", "gostou", "adorou", "aproveitando")
# A delivered order is no longer on its way, and a cancelled one never will be.
ON_ITS_WAY_CLAIM = ("a caminho", "saiu para entrega", "foi enviado", "em transito", "chegando")
RULED_OUT = {
    "in_transit": (*ARRIVED, *NOT_RECEIVED),
    "unhappy": (*PRAISE_SEEKING, *ON_ITS_WAY_CLAIM),
    "unreviewed": ON_ITS_WAY_CLAIM,
    # An apology to a customer who gave four or five stars answers a complaint never made.
    "happy": (*ON_ITS_WAY_CLAIM, *APOLOGY),
    "lost": (*ARRIVED, *NOT_RECEIVED, *ON_ITS_WAY_CLAIM),
}


@dataclass(frozen=True)
class Objective:
    """What a notification is for: the customer's situation, and what it must say (a cue of
    each group); an offer must also be given to the customer (GIVEN)."""

    situation: str
    needs: tuple[tuple[str, ...], ...]
    gives: bool = False


# The objectives a retailer's CRM sends for each situation, as data prep writes them; the
# order is prep's draw order.
OBJECTIVES: dict[str, Objective] = {
    "avisar que o pedido está a caminho": Objective("in_transit", (ON_ITS_WAY,)),
    "tranquilizar sobre o prazo de entrega": Objective("in_transit", (ON_TIME,)),
    "recuperar o cliente insatisfeito com um cupom": Objective("unhappy", (COUPON,), gives=True),
    "pedir desculpas e oferecer ajuda": Objective("unhappy", (APOLOGY, HELP)),
    "pedir uma avaliação da compra": Objective("unreviewed", (REVIEW_REQUEST,)),
    "lembrar de avaliar o produto recebido": Objective("unreviewed", (REVIEW_REQUEST,)),
    "sugerir uma nova compra na mesma categoria": Objective("happy", (NEW_PURCHASE,)),
    "oferecer frete grátis na próxima compra": Objective("happy", (FREE_SHIPPING,), gives=True),
    "reengajar o cliente após o cancelamento": Objective("lost", (COME_BACK,)),
    "trazer o cliente de volta com uma oferta": Objective("lost", (OFFER,), gives=True),
}


def objective_named(name: str) -> Objective | None:
    """The objective of that name, accents and case aside; None for one the reward does not
    know."""
    key = " ".join(fold(name).split())
    return next((o for known, o in OBJECTIVES.items() if fold(known) == key), None)


def _says(text: str, cues: tuple[str, ...]) -> bool:
    said, _ = cues_said(clauses_of(_PERCENT.sub(" desconto ", text)), cues)
    return said


def objective_keeps(text: str, objective: Objective) -> tuple[float, float]:
    """(what the total keeps for what the objective needs and the notification leaves unsaid,
    what it keeps for what the situation rules out and the notification says)."""
    met = sum(_says(text, needs) for needs in objective.needs) / len(objective.needs)
    if objective.gives and not offer_given(text):
        met = 0.0
    ruled_out = _says(_NOT_ARRIVAL.sub(" ", fold(text)), RULED_OUT[objective.situation])
    return (
        OFF_OBJECTIVE_KEEPS + (1 - OFF_OBJECTIVE_KEEPS) * met,
        RULED_OUT_KEEPS if ruled_out else 1.0,
    )


def length_credit(length: int) -> float:
    if length == 0:
        return 0.0
    if length <= MAX_CHARS:
        return 1.0
    return max(0.0, (ZERO_CREDIT_AT - length) / (ZERO_CREDIT_AT - MAX_CHARS))


def score(completion: Any, push_objective: str | None = None) -> Score:
    text = completion_text(completion).strip()
    folded = fold(text)
    words = re.findall(r"[a-z]{2,}", folded)
    if len(words) < MIN_WORDS:
        return Score(0.0, dict.fromkeys(COMPONENTS, 0.0))
    portuguese = (
        0.5 * bool(_ACCENTED.search(text[: MAX_CHARS * 2]))
        + 0.5 * min(distinct_hits(folded, PORTUGUESE_STEMS), 2) / 2
    )
    generic = any(phrase in folded for phrase in GENERIC_PHRASES)
    fits = length_credit(len(text))
    components = {
        "length": W_LENGTH * fits,
        "portuguese": W_PORTUGUESE * portuguese * fits,
        "creativity": 0.0 if generic else W_CREATIVITY * min(len(set(words)), 6) / 6 * fits,
        "formal": -FORMAL_PENALTY if any(p in folded for p in FORMAL_PHRASES) else 0.0,
    }
    subtotal = clamp01(sum(components.values()))
    several = sum(1 for line in text.splitlines() if WORD_LINE.search(line)) > 1
    components["several"] = -(1 - SEVERAL_KEEPS) * subtotal if several else 0.0
    subtotal += components["several"]
    for name, keeps, found in (
        ("unsendable", UNSENDABLE_KEEPS, unsendable(text)),
        ("placeholder", PLACEHOLDER_KEEPS, placeholder(text)),
        ("unbacked", UNBACKED_KEEPS, unbacked(text)),
        ("refusal", REFUSAL_KEEPS, refuses(text)),
    ):
        components[name] = -(1 - keeps) * subtotal if found else 0.0
        subtotal += components[name]
    objective = objective_named(push_objective) if isinstance(push_objective, str) else None
    if objective is not None:
        needs_keep, situation_keeps = objective_keeps(text, objective)
        components["objective"] = -(1 - needs_keep) * subtotal
        subtotal += components["objective"]
        components["situation"] = -(1 - situation_keeps) * subtotal
        subtotal += components["situation"]
    return Score(clamp01(subtotal), components)


def unsendable(text: str) -> bool:
    """Spanish, shouting, or hashtags instead of a message."""
    words = re.findall(r"[a-z]+", fold(text))
    spanish = sum(word in SPANISH for word in set(words)) + sum(m in text for m in SPANISH_MARKS)
    letters = [ch for ch in text if ch.isalpha()]
    shouting = len(letters) >= MIN_LETTERS_TO_SHOUT and (
        sum(ch.isupper() for ch in letters) / len(letters) >= SHOUTING_SHARE
    )
    tokens = text.split()
    hashtags = bool(tokens) and sum(token.startswith("#") for token in tokens) * 2 >= len(tokens)
    return spanish >= SPANISH_FOR_A_MESSAGE or shouting or hashtags
