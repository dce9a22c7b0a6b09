"""What a notification promises and does (rewards/push.py): placeholders, promises no prompt's
data backs, refusals, and an objective done rather than named; on notifications no probe or rule
test sends."""

from __future__ import annotations

import pytest

from rewards import score
from rewards.push import offer_given, placeholder, refuses, unbacked


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Olá {{ primeiro_nome }}, seu pedido está a caminho!", True),
        ("<NOME>, seu pedido está a caminho!", True),
        ("Use o cupom [CODIGO] e ganhe XX% off", True),
        ("Seu pedido está a caminho! <3", False),
        ("Frete grátis [hoje] pra você", False),  # brackets around a word, not a slot
    ],
)
def test_a_placeholder_is_found(text: str, found: bool) -> None:
    assert placeholder(text) is found


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Oferta válida só até amanhã!", True),
        ("Seu pedido chega na sexta-feira.", True),
        ("Entregamos em 48 horas, prometido.", True),
        ("Produto com garantia estendida grátis.", True),
        ("Pode ficar tranquilo: devolvemos o valor se não chegar.", True),
        ("Últimos dias de frete grátis!", True),
        ("Garanta já o seu na próxima compra!", False),  # an invitation, not a guarantee
        ("Seu pedido está a caminho, acompanhe pelo app.", False),
        ("Aproveite hoje as novidades da loja.", False),
    ],
)
def test_a_promise_no_data_backs_is_found(text: str, found: bool) -> None:
    assert unbacked(text) is found


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("Infelizmente não podemos ajudar com esse pedido.", True),
        ("Sobre o atraso, procure os Correios.", True),
        ("Não é com a gente, fale com o vendedor.", True),
        ("Não perca: tem novidade pra você!", False),
        ("Fale com a gente, vamos resolver!", False),
    ],
)
def test_a_refusal_is_found(text: str, found: bool) -> None:
    assert refuses(text) is found


@pytest.mark.parametrize(
    ("text", "given"),
    [
        ("Separamos um cupom pra você voltar!", True),
        ("Volte com 20% OFF em eletrônicos.", True),
        ("Use BEMVINDO5 no próximo pedido.", True),
        ("Confira nossas ofertas e cupons!", False),
        ("Frete grátis? Aqui tem!", False),
    ],
)
def test_an_offer_is_given_or_advertised(text: str, given: bool) -> None:
    assert offer_given(text) is given


WIN_BACK = "trazer o cliente de volta com uma oferta"
REVIEW = "pedir uma avaliação da compra"


@pytest.mark.parametrize(
    ("objective", "done", "named"),
    [
        (
            WIN_BACK,
            "Joana, separamos um cupom pra você voltar às compras de pet shop!",
            "Joana, temos cupons e ofertas no app!",
        ),
        (
            REVIEW,
            "Joana, sua compra chegou? Avalie em um toque ⭐",
            "Joana, avaliações deixam a loja melhor ⭐",
        ),
    ],
)
def test_an_objective_is_done_not_named(objective: str, done: str, named: str) -> None:
    did = score("push", done, push_objective=objective).total
    assert score("push", named, push_objective=objective).total < 0.6 * did


def test_each_fault_costs_against_the_same_notification_without_it() -> None:
    plain = "Joana, sua próxima compra de pet shop tem frete grátis! 🐶"
    objective = "oferecer frete grátis na próxima compra"
    base = score("push", plain, push_objective=objective)
    for faulty, component in (
        (plain.replace("Joana", "{nome}"), "placeholder"),
        (plain.replace("! 🐶", ", só até domingo! 🐶"), "unbacked"),
        (plain + " Dúvidas? Não podemos ajudar.", "refusal"),
    ):
        result = score("push", faulty, push_objective=objective)
        assert result.components[component] < 0 == base.components[component], component
        assert result.total < 0.6 * base.total, component
