"""A review's cues read in their context (rewards/review_evidence.py), and a summary held to the
review: table-driven, on reviews no probe, rule test or audit line uses."""

from __future__ import annotations

import json

import pytest

from rewards import score
from rewards.review_evidence import ADDED, OPPOSITE, read_review

# (review, stars, what the reading must say: field -> expected value, or None for silent)
READINGS = [
    # praise of the courier or the delivery is no delivery problem; a complaint of one is
    ("O motoboy foi super gentil e o tênis é confortável.", 5, {"delivery_issue": False}),
    ("O carteiro jogou a caixa no quintal e molhou tudo.", 1, {"delivery_issue": True}),
    # a promise kept is no seller failure; one broken is
    ("Veio conforme prometido, ótimo vendedor.", 5, {"seller_issue": False}),
    ("Não cumpriram o prometido na troca.", 1, {"seller_issue": True}),
    # delay words of what a product does
    ("O notebook demora demais para ligar.", 2, {"product_issue": True, "delivery_issue": False}),
    ("A balança atrasa uns 2 segundos por leitura.", 3, {"product_issue": True}),
    ("Demorou 40 dias para chegar.", 1, {"delivery_issue": True}),
    ("O vendedor demorou pra me responder sobre a troca.", 2, {"seller_issue": True}),
    # missing parts are the product's, missing items of the order the delivery's
    ("A estante veio faltando os parafusos.", 2, {"product_issue": True}),
    ("Comprei dois e veio faltando um.", 2, {"delivery_issue": True}),
    # loyalty recommends; never again elsewhere is loyalty
    ("Só compro nessa loja, entrega sempre certinha.", 5, {"would_recommend": True}),
    ("Não compro mais em outras lojas depois dessa.", 5, {"would_recommend": True}),
    ("Nunca mais compro aqui.", 1, {"would_recommend": False}),
    # a recommendation taken back, negated further off, or not yet made
    ("Recomendo demais... só que não.", 1, {"would_recommend": False}),
    ("Indico, pra quem gosta de ser enganado.", 1, {"would_recommend": False}),
    ("Não dá pra recomendar um produto desses.", 1, {"would_recommend": False}),
    ("Não sei se recomendo, ainda vou testar.", 3, {"would_recommend": None}),
    # a seller that ignored the customer
    ("Abri chamado e a loja simplesmente ignorou.", 1, {"seller_issue": True}),
    ("Prometeram ligar e nem entraram em contato.", 1, {"seller_issue": True}),
    # "ainda não" of what the customer has not done is no delivery problem
    ("Ainda não usei, mas parece bom.", 4, {"delivery_issue": False}),
]


@pytest.mark.parametrize(("text", "stars", "expected"), READINGS, ids=[r[0] for r in READINGS])
def test_a_cue_is_read_in_its_context(text: str, stars: int, expected: dict) -> None:
    reading = read_review(text, stars, False)
    for name, value in expected.items():
        if value is None:
            assert reading.expected(name) is None, name
        else:
            assert reading.expected(name) is value, name


# (review, summary, what the summary is to it: None faithful, OPPOSITE or ADDED)
SUMMARIES = [
    ("O ventilador chegou rápido e funciona bem.", "Ventilador chegou rápido e funciona.", None),
    ("O ventilador chegou rápido e funciona bem.", "O ventilador chegou com defeito.", OPPOSITE),
    ("O ventilador parou de funcionar em uma semana.", "Ventilador funcionando bem.", OPPOSITE),
    (
        "O ventilador parou de funcionar em uma semana.",
        "Cliente satisfeito com o ventilador.",
        OPPOSITE,
    ),
    (
        "O ventilador parou de funcionar em uma semana.",
        "Ventilador parou e a entrega atrasou.",
        ADDED,
    ),
    ("O ventilador parou de funcionar em uma semana.", "Ventilador parou após 30 dias.", ADDED),
    (
        "O ventilador parou de funcionar em uma semana.",
        "Ventilador parou; loja deu reembolso.",
        ADDED,
    ),
    ("O ventilador parou de funcionar em uma semana.", "Ventilador da Ventisul parou.", ADDED),
    # a review that says both: a summary of either half is no opposite
    ("Chegou antes do prazo, mas veio riscado.", "Chegou antes do prazo.", None),
    ("Chegou antes do prazo, mas veio riscado.", "Produto veio riscado.", None),
]


@pytest.mark.parametrize(("review", "summary", "fault"), SUMMARIES, ids=[s[1] for s in SUMMARIES])
def test_a_summary_is_held_to_its_review(review: str, summary: str, fault: str | None) -> None:
    assert read_review(review, 2, False).summary_fault(summary) == fault


@pytest.mark.parametrize("fault", [OPPOSITE, ADDED])
def test_an_unfaithful_summary_costs_what_a_wrong_flag_does(fault: str) -> None:
    review = "O ventilador parou de funcionar em uma semana."
    summary = next(s for r, s, f in SUMMARIES if r == review and f == fault)
    context = {
        "review_score": 1,
        "review_text": review,
        "gold_delivered_late": False,
        "gold_category": "eletroportateis",
    }
    answer = {
        "sentiment_score": 1,
        "sentiment": "negativo",
        "delivery_issue": False,
        "product_issue": True,
        "seller_issue": False,
        "delivered_late": False,
        "would_recommend": False,
        "churn_risk": "alto",
        "product_category": "eletroportateis",
        "summary": "Ventilador parou de funcionar em uma semana.",
    }
    faithful = score("extraction", json.dumps(answer), **context)
    false_to_it = score("extraction", json.dumps({**answer, "summary": summary}), **context)
    assert false_to_it.total < 0.7 * faithful.total
    component = "missed" if fault == OPPOSITE else "invented"
    assert false_to_it.components[component] < 0 == faithful.components[component]
