"""What an analysis claims about its summary's table, read sentence by sentence and held to it
(rewards/table_claims.py): table-driven, on tables and sentences no probe or reference uses."""

from __future__ import annotations

import pytest

from rewards.table_claims import (
    figures,
    groups_named,
    parse_table,
    read_claims,
    targeted_actions,
)

# A state's months: groups written "2018-03", "março de 2018", or "março" alone where one row is.
MONTHS = (
    "Resumo de dados: evolução mensal em BA\nPeríodo: 01/2018 a 06/2018; 300 pedidos\n\n"
    "| mês | pedidos | ticket médio | frete médio | atraso | nota média |\n"
    "|---|---|---|---|---|---|\n"
    "| 2018-03 | 80 | R$ 150,00 | R$ 25,10 | 22,5% | 3,1 |\n"
    "| 2018-01 | 70 | R$ 120,40 | R$ 21,00 | 8,0% | 3,9 |\n"
    "| 2018-02 | 60 | R$ 99,90 | R$ 18,30 | 8,0% | 4,2 |\n"
    "| 2018-04 | 50 | R$ 210,00 | R$ 30,00 | — | 3,5 |"
)
# Payment types as Olist stores them, and a column the reader has no word for.
PAYMENTS = (
    "| forma de pagamento | pedidos | valor médio pago | cancelamento |\n|---|---|---|---|\n"
    "| credit_card | 5547 | R$ 175,33 | 7,0% |\n| boleto | 1405 | R$ 155,13 | 5,8% |\n"
    "| debit_card | 76 | R$ 134,80 | 7,9% |"
)


def test_a_table_is_read_with_its_notation_and_its_gaps() -> None:
    table = parse_table(MONTHS)
    assert table is not None
    assert table.metrics == ("orders", "ticket", "freight", "late", "rating")
    assert table.total_orders == 300
    assert table.values("late") == {"2018-03": 22.5, "2018-01": 8.0, "2018-02": 8.0}
    assert table.rows["2018-04"]["ticket"].value == 210.0
    payments = parse_table(PAYMENTS)
    assert payments is not None and payments.values("orders")["credit_card"] == 5547
    assert payments.metrics[-1] == "cancelamento"  # a metric of its own, by its header
    assert parse_table("Resumo sem tabela.") is None


CASES = [
    # (sentence, [(kind, groups, truth)]) on MONTHS
    (
        "Março de 2018 teve o maior atraso: 22,5%.",
        [("superlative", ("2018-03",), True), ("value", ("2018-03",), True)],
    ),
    ("O pior atraso foi em janeiro.", [("superlative", ("2018-01",), False)]),
    (
        "Fevereiro tem a melhor nota média (4,2).",
        [("superlative", ("2018-02",), True), ("value", ("2018-02",), True)],
    ),
    (
        "Janeiro e fevereiro têm os menores atrasos.",
        [("superlative", ("2018-01", "2018-02"), True)],
    ),
    ("Março atrasa mais que fevereiro.", [("comparison", ("2018-03", "2018-02"), True)]),
    (
        "A nota de março é maior do que a de janeiro.",
        [("comparison", ("2018-03", "2018-01"), False)],
    ),
    ("Março não teve o menor frete.", [("superlative", ("2018-03",), True)]),
    (
        "Abril tem o frete mais caro (R$ 30,00).",
        [("superlative", ("2018-04",), True), ("value", ("2018-04",), True)],
    ),
    ("Janeiro é o segundo maior em pedidos.", [("superlative", ("2018-01",), True)]),
    ("Março é um dos maiores em ticket médio.", [("superlative", ("2018-03",), True)]),
    # a number beside the wrong month, or nobody's
    ("Em fevereiro o atraso foi de 22,5%.", [("value", ("2018-02",), False)]),
    ("Janeiro teve nota 4,7.", [("value", ("2018-01",), False)]),
    # a share of the slice's orders, right and wrong
    ("Março concentra 27% dos pedidos.", [("value", ("2018-03",), True)]),
    ("Março concentra 40% dos pedidos.", [("value", ("2018-03",), False)]),
    # values of several months, in the order the months are named
    (
        "Janeiro e março (8,0% e 22,5%) puxam o atraso.",
        [("value", ("2018-01",), True), ("value", ("2018-03",), True)],
    ),
    (
        "Janeiro e março (22,5% e 8,0%) puxam o atraso.",
        [("value", ("2018-01",), False), ("value", ("2018-03",), False)],
    ),
    # not claims: a target, a range, a count of time, the slice's total, a part of a total,
    # a comparison left unfinished, a superlative over a part of the table
    ("Reduzir o atraso de março para 10%.", []),
    ("Manter janeiro com nota entre 3,5 e 4,5.", []),
    ("Acompanhar março pelos próximos 3 meses.", []),
    ("Março teve 80 dos 300 pedidos.", [("value", ("2018-03",), True)]),
    ("Março responde pela maior parte dos atrasos.", []),
    ("Em fevereiro o atraso foi menor.", []),
    ("Fevereiro teve o menor atraso entre os meses recentes.", []),
    ("Mais atenção à nota de março.", []),
]


@pytest.mark.parametrize(("sentence", "expected"), CASES, ids=[c[0] for c in CASES])
def test_each_claim_is_read_and_held_to_the_table(sentence: str, expected: list) -> None:
    table = parse_table(MONTHS)
    assert table is not None
    found = [(c.kind, c.groups, c.true) for c in read_claims(sentence, table)]
    assert found == expected


def test_payment_types_are_named_as_people_write_them() -> None:
    table = parse_table(PAYMENTS)
    assert table is not None
    claims = read_claims("Débito tem o maior cancelamento (7,9%).", table)
    assert [(c.kind, c.groups, c.metric, c.true) for c in claims] == [
        ("superlative", ("debit_card",), "cancelamento", True),
        ("value", ("debit_card",), "cancelamento", True),
    ]
    assert groups_named("Boleto e cartão de crédito lideram.", table) == {"boleto", "credit_card"}


def test_a_restated_table_claims_nothing() -> None:
    table = parse_table(MONTHS)
    assert table is not None
    assert read_claims(MONTHS.split("\n\n")[1], table) == []


def test_recommendations_that_name_a_group_are_counted() -> None:
    table = parse_table(MONTHS)
    assert table is not None
    text = (
        "- Revisar a logística de março.\n- Monitorar as avaliações.\n"
        "- Priorizar fevereiro e abril."
    )
    assert targeted_actions(text, table) == 2


def test_figures_leave_out_counts_of_things_and_dates() -> None:
    assert [sorted(r.value for r in f) for f in figures("3 estados, 90 dias, 14,8% em 2018")] == [
        [14.8]
    ]
