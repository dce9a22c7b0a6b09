"""The reward rules, table-driven, with Portuguese examples: the V4.2 reports' V4.2.1 rules, and
what makes a reward pay for a right, finished answer rather than its shape."""

import json

import pytest

from rewards import (
    COMPONENTS,
    CUT_KEEPS,
    READS,
    SCORERS,
    TokenBudget,
    UnknownTaskError,
    push,
    score,
    sql_qa,
    trl_component_functions,
    trl_reward_functions,
)
from rewards.classify import classify
from rewards.common import REPETITION_NGRAM, WORD, first_instance, fold, repeated_share
from rewards.context import CONTEXT_KEYS, ContextError
from rewards.extraction import normalize_pt_decimals, parse_json_object
from rewards.review_evidence import IMPLIED, SILENT, read_review
from rewards.sql_sandbox import execute
from tasks.evaluation.audit import load_audit_set
from tasks.prep.rows import prompt_row

GOOD = (
    '{"sentiment": "negativo", "sentiment_score": 1, "delivery_issue": true, '
    '"product_issue": true, "seller_issue": false, "delivered_late": true, '
    '"would_recommend": false, "churn_risk": "alto", "product_category": "moveis_decoracao", '
    '"summary": "Chegou quebrado e atrasado."}'
)
# The review GOOD reads, with its order's data.
REVIEW = {
    "review_score": 1,
    "review_text": "Chegou quebrado\nA cadeira veio quebrada e atrasou uma semana. Não recomendo.",
    "gold_delivered_late": True,
    "gold_category": "moveis_decoracao",
}
FORM, SENTIMENT, EVIDENCE, GOLD_PART = 0.25, 0.30, 0.30, 0.15
# The chair broken, not late.
BROKEN_ON_TIME = "A cadeira veio quebrada. Não recomendo."


def _with(**fields) -> str:
    answer = json.loads(GOOD)
    answer.update(fields)
    return json.dumps(answer, ensure_ascii=False)


EXTRACTION = [
    # (completion, context, expected total)
    (GOOD, REVIEW, 1.0),
    (f"```json\n{GOOD}\n```", REVIEW, 1.0),
    # chat around the object: a little of the JSON part
    (f"Segue o JSON: {GOOD}", REVIEW, 1.0 - FORM * 0.10),
    # the opposite of one star keeps 0.35 of what it had (everything else right)
    (_with(sentiment="positivo"), REVIEW, 0.35 * (1.0 - SENTIMENT)),
    # a neutral answer to a one-star complaint that says the text is worth 1: it contradicts its
    # own score, like the opposite (and a one-star review's neutro earns nothing of the sentiment)
    (_with(sentiment="neutro"), REVIEW, 0.35 * (1.0 - SENTIMENT)),
    # neutral with a 3 is at least one answer, but none of the sentiment and a third of the gold
    (_with(sentiment="neutro", sentiment_score=3), REVIEW, 1.0 - SENTIMENT - GOLD_PART / 3),
    # on two stars neutro is a neighbour, not an end of the scale: a fifth of the sentiment
    (
        _with(sentiment="neutro", sentiment_score=2),
        {**REVIEW, "review_score": 2},
        1.0 - SENTIMENT * 0.8,
    ),
    # a five-star score written beside "negativo" contradicts itself even when the stars are 1
    (_with(sentiment_score=5), REVIEW, 0.35 * (1.0 - GOLD_PART / 3)),
    # the broken chair, the review's point, denied: the total keeps 0.6 (the evidence weighs
    # 3 for each thing the customer wrote: late, broken, not recommended, so churn; 0.5 for the
    # seller, of whom nothing is said; 1 for the summary)
    (_with(product_issue=False), REVIEW, 0.6 * (1.0 - EVIDENCE * 3 / 13.5)),
    # "não recomendo" answered with a recommendation hides the complaint as a denied problem does
    (_with(would_recommend=True), REVIEW, 0.6 * (1.0 - EVIDENCE * 3 / 13.5)),
    # and so does one the stars alone rule out (a one-star "Péssimo" of an order on time: the
    # stars weigh 1 of 5, what the dates imply 1, silence on product and seller 0.5 each, summary 1)
    (
        _with(
            would_recommend=True,
            delivery_issue=False,
            product_issue=False,
            delivered_late=False,
            summary="Péssimo",
        ),
        {**REVIEW, "review_text": "Péssimo", "gold_delivered_late": False},
        0.6 * (1.0 - EVIDENCE * 1 / 5),
    ),
    # a delivery problem on an order that came on time, of which the customer says nothing, is a
    # false alarm and costs what a miss does (the evidence weighs 1 for the dates, 3 each for the
    # broken chair, "não recomendo" and so churn, 0.5 for the seller, 1 for the summary)
    (
        _with(delivered_late=False, summary="A cadeira veio quebrada."),
        {**REVIEW, "review_text": BROKEN_ON_TIME, "gold_delivered_late": False},
        0.6 * (1.0 - EVIDENCE * 1 / 11.5),
    ),
    # so is one the customer's words rule out, where the order has no dates
    (
        _with(delivered_late=False, summary="A cadeira veio quebrada."),
        {
            **REVIEW,
            "review_text": "Chegou antes do prazo. " + BROKEN_ON_TIME,
            "gold_delivered_late": None,
        },
        0.6 * (1.0 - EVIDENCE * 1 / 11.5),
    ),
    # silence rules nothing out: with no dates and no word of delivery, the flag costs only its
    # weak evidence (0.5)
    (
        _with(delivered_late=False, summary="A cadeira veio quebrada."),
        {**REVIEW, "review_text": BROKEN_ON_TIME, "gold_delivered_late": None},
        1.0 - EVIDENCE * 0.5 / 11,
    ),
    # a boolean is not the integer score: 9/10 values, and the gold score check fails
    (_with(sentiment_score=True), REVIEW, 1.0 - FORM * 0.04 - GOLD_PART / 3),
    # two fields of ten: the judgement is earned on two of ten fields
    (
        '{"sentiment": "negativo", "sentiment_score": 1}',
        REVIEW,
        FORM * (0.30 + 0.06 + 0.08) + 0.2 * (SENTIMENT + GOLD_PART / 3),
    ),
    (GOOD, {}, 1.0),  # no stars: only the form can be judged, the V4.2 reports' weights
    ("O cliente ficou insatisfeito.", REVIEW, 0.0),
    ("", REVIEW, 0.0),
]


@pytest.mark.parametrize(("completion", "context", "expected"), EXTRACTION)
def test_extraction(completion: str, context: dict, expected: float) -> None:
    assert score("extraction", completion, **context).total == pytest.approx(expected)


def test_pt_decimals_become_json_numbers_but_lists_are_left_alone() -> None:
    assert normalize_pt_decimals('{"nota": 4,5, "xs": [1,2]}') == '{"nota": 4.5, "xs": [1,2]}'
    assert parse_json_object('{"nota": 4,5}') == ({"nota": 4.5}, True)


@pytest.mark.parametrize(
    ("late", "category", "expected"),
    [
        (True, "moveis_decoracao", 1.0),
        (True, "Móveis decoração", 1.0),  # folded: accents, case and spaces don't matter
        (True, "cama_mesa_banho", 1.0 - GOLD_PART / 3),
    ],
)
def test_extraction_gold_fields_count(late: bool, category: str, expected: float) -> None:
    context = {**REVIEW, "gold_delivered_late": late, "gold_category": category}
    assert score("extraction", GOOD, **context).total == pytest.approx(expected)


# What the customer wrote, read with Portuguese negation: (review, stars, the judgement fields a
# reader gives it).
READINGS = [
    (
        "Não recebi meu produto. Comprei há um mês e nada.",
        1,
        {"delivery_issue": True, "product_issue": False, "would_recommend": False},
    ),
    ("Chegou antes do prazo, não tive nenhum problema.", 5, {"delivery_issue": False}),
    ("Produto sem defeito, recomendo!", 5, {"product_issue": False, "would_recommend": True}),
    ("Veio quebrado e o vendedor não responde.", 1, {"product_issue": True, "seller_issue": True}),
    ("Não recomendo, nunca mais compro.", 2, {"would_recommend": False, "churn_risk": "alto"}),
    ("Péssimo", 1, {"delivery_issue": False, "churn_risk": "alto"}),  # stars decide the rest
    # an order that never came, told the ways Olist customers tell it
    ("Cadê meu pedido????", 1, {"delivery_issue": True}),
    ("Produto não entregue", 1, {"delivery_issue": True}),
    ("Estou esperando o pedido", 2, {"delivery_issue": True}),
    ("Gostaria de receber meu produto", 1, {"delivery_issue": True}),
    # and praise that shares their letters
    ("Cadeira azul linda, melhor do que eu estava esperando.", 5, {"delivery_issue": False}),
    ("Adorei receber o produto, recomendo.", 5, {"delivery_issue": False}),
    ("Ótimo, comprarei novamente", 5, {"churn_risk": "baixo", "would_recommend": True}),
    # the seller's failure told as what it did not give, and the same words where it gave them
    ("Mandei três e-mails e nem dão retorno.", 1, {"seller_issue": True}),
    ("Veio riscado e até hoje não foi trocado.", 1, {"product_issue": True, "seller_issue": True}),
    ("Não estornaram o valor.", 1, {"seller_issue": True}),
    ("Tive retorno rápido da loja, ótimo atendimento!", 5, {"seller_issue": False}),
    ("Precisei trocar o tamanho e a troca foi fácil. Adorei.", 5, {"seller_issue": False}),
    ("Produto ótimo, nem precisei trocar.", 5, {"seller_issue": False}),
    # "não" typed short, and "n" before a number, which is "número"
    ("n recebi ainda", 1, {"delivery_issue": True}),
    ("ñ chegou", 2, {"delivery_issue": True}),
    ("Pedido n 123456 atrasou", 1, {"delivery_issue": True}),
    ("Produto n 1 veio quebrado", 1, {"product_issue": True}),
]


@pytest.mark.parametrize(("text", "stars", "expected"), READINGS)
def test_a_review_is_read_with_its_negations(text: str, stars: int, expected: dict) -> None:
    reading = read_review(text, stars, None)
    assert {name: reading.expected(name) for name in expected} == expected


@pytest.mark.parametrize(
    ("delivered_late", "weight"), [(True, IMPLIED), (False, IMPLIED), (None, SILENT)]
)
def test_the_order_dates_weigh_on_delivery_when_the_text_is_silent(delivered_late, weight) -> None:
    delivery = read_review("Péssimo", 1, delivered_late).fields["delivery_issue"]
    assert (delivery.right, delivery.weight) == (frozenset({bool(delivered_late)}), weight)


def test_a_constant_judgement_scores_far_below_a_reading_one() -> None:
    """Everything "all is well" is what SmolLM2 said to every review: on one-star complaints it
    must score far below answers that read them, and on five-star praise it is right."""
    constant = _with(
        sentiment="positivo", delivery_issue=False, product_issue=False, churn_risk="baixo"
    )
    complaints = [
        ("Não recebi o pedido até hoje.", {"delivery_issue": True, "product_issue": False}),
        ("Veio quebrado, péssimo.", {"delivery_issue": False, "product_issue": True}),
    ]
    for text, issues in complaints:
        context = {"review_score": 1, "review_text": text}
        reading = _with(delivered_late=False, summary=text, **issues)
        assert score("extraction", constant, **context).total < 0.3 * (
            score("extraction", reading, **context).total
        )
    praise = {"review_score": 5, "review_text": "Chegou rápido, adorei!"}
    happy = _with(
        sentiment="positivo", sentiment_score=5, delivery_issue=False, product_issue=False,
        delivered_late=False, would_recommend=True, churn_risk="baixo", summary="Adorei, rápido.",
    )  # fmt: skip
    assert score("extraction", happy, **praise).total == pytest.approx(1.0)


def test_a_summary_must_say_something_of_its_review() -> None:
    generic = _with(summary="Cliente deu nota 1 para a compra.")
    assert score("extraction", generic, **REVIEW).total < score("extraction", GOOD, **REVIEW).total


def test_repaired_json_gets_less_than_valid_json() -> None:
    cut = GOOD[: GOOD.index('"seller_issue"')]
    repaired = score("extraction", cut)
    assert repaired.components["json"] == pytest.approx(0.20)
    assert repaired.total < score("extraction", GOOD).total


SQL = (
    "```sql\nSELECT COUNT(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
    "WHERE c.customer_state = 'SP';\n```"
)
GOLD_SQL = (
    "SELECT COUNT(*) FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
    "WHERE c.customer_state = 'SP'"
)
EXPLANATION = "\nA consulta conta os pedidos de clientes de SP: são 2.972 pedidos no total."
SQL_CASES = [
    # match 0.40 + runs 0.10 + structure 0.15 + explanation 0.15 + numbers 0.10 + domain 0.10
    (SQL + EXPLANATION, 1.0),
    (SQL, 0.40 + 0.10 + 0.15),
    # runs, answers another question: all but the match and the numbers keep half, and the
    # number it states, the gold's, is not what its own query returns: half again; and its
    # explanation names SP, a filter its query does not have (no question here says SP): half
    (SQL.replace("'SP'", "'RJ'") + EXPLANATION, 0.5 * 0.5 * 0.5 * (1.0 - 0.40 - 0.10)),
    # the gold count among extra columns: half the match credit
    (SQL.replace("COUNT(*)", "c.customer_state, COUNT(*)") + EXPLANATION, 1.0 - 0.20),
    # does not run: wrong too, and below the query that runs and answers another question
    (SQL.replace("SELECT", "SELEC") + EXPLANATION, 0.5 * (0.15 + 0.10 + 0.10)),
    ("Os clientes de SP fizeram 2.972 pedidos, com ticket médio alto.", 0.5 * (0.10 + 0.10)),
    ("```sql\nDROP TABLE orders;\n```" + EXPLANATION, 0.0),  # hostile: nothing at all
    ("", 0.0),
]


@pytest.mark.parametrize(("completion", "expected"), SQL_CASES)
def test_sql_tiers_with_execution(prepared, completion: str, expected: float) -> None:
    store, manifest = prepared
    database = store.path(manifest.database)
    result = score("sql_qa", completion, database=database, gold_sql=GOLD_SQL)
    assert result.total == pytest.approx(expected)


def test_sql_without_a_database_gets_no_execution_credit() -> None:
    """Nothing to run the query on, nor to hold its stated number to."""
    result = score("sql_qa", SQL + EXPLANATION, gold_sql=GOLD_SQL)
    assert result.total == pytest.approx(0.40)
    assert result.components["match"] == result.components["runs"] == 0.0
    assert result.components["numbers"] == result.components["wrong_number"] == 0.0


def test_sql_gold_answer_column_is_used_when_present(prepared) -> None:
    """The gold rows as JSON stand in for the gold SQL: the right rows earn the match, others
    none, and without a database the stated number is held to them."""
    store, manifest = prepared
    database = store.path(manifest.database)
    [(count,)] = execute(database, GOLD_SQL).rows
    right = score("sql_qa", SQL, database=database, gold_answer=json.dumps([[count]]))
    assert right.components["match"] == pytest.approx(0.40)
    wrong = score("sql_qa", SQL, database=database, gold_answer=json.dumps([[count + 1]]))
    assert wrong.components["match"] == 0.0 and wrong.total < right.total
    offline = {"gold_answer": json.dumps([[count]])}
    assert score("sql_qa", SQL + EXPLANATION, **offline).components["numbers"] == 0.10
    invented = SQL + EXPLANATION.replace("2.972", f"{count + 1:,}".replace(",", "."))
    assert score("sql_qa", invented, **offline).components["wrong_number"] < 0


QUESTION = "Quantos pedidos foram feitos por clientes do estado SP?"
RIGHT_NUMBER = SQL + "\nConta os pedidos de clientes de SP: {}."
# (explanation's stated numbers, what they are): held to the query's result (2,972) and the gold.
STATED = [
    ("são 2.972 pedidos", "right"),  # Brazilian thousands
    ("são 2972 pedidos, 100% dos pedidos do estado", "mixed"),  # a side figure it cannot check
    ("são 2.972 pedidos, o 1º estado em volume", "right"),  # an ordinal states no result
    ("cerca de 3 mil pedidos", "wrong"),
    ("são 41.746 pedidos", "wrong"),  # the full public dataset's count, not this database's
    ("a consulta traz 1 linha com o total", "right"),  # how many rows it returns
    ("o total do estado, apurado em 03/11/2018", "none"),  # a date states no result
    ("o total do estado SP", "none"),
]


@pytest.mark.parametrize(("stated", "kind"), STATED)
def test_a_stated_number_is_held_to_the_result(prepared, stated: str, kind: str) -> None:
    store, manifest = prepared
    database = store.path(manifest.database)
    context = {"database": database, "gold_sql": GOLD_SQL, "question": QUESTION}
    result = score("sql_qa", RIGHT_NUMBER.format(stated), **context)
    none = score("sql_qa", RIGHT_NUMBER.format("o total do estado SP"), **context)
    credit, cost = result.components["numbers"], result.components["wrong_number"]
    assert (credit > 0, cost < 0) == {
        "right": (True, False),
        "mixed": (False, True),
        "wrong": (False, True),
        "none": (False, False),
    }[kind]
    if kind == "wrong":  # costs more than stating none
        assert result.total < none.total
    if kind == "mixed":  # the wrong share costs: less than a wholly wrong answer
        wrong = score("sql_qa", RIGHT_NUMBER.format("são 41.746 pedidos"), **context)
        assert wrong.total < result.total < none.total


def test_the_question_s_numbers_are_no_claim_of_a_result(prepared) -> None:
    store, manifest = prepared
    database = store.path(manifest.database)
    gold = (
        "SELECT c.customer_city, COUNT(*) AS pedidos FROM orders o JOIN customers c "
        "ON c.customer_id = o.customer_id WHERE c.customer_state = 'SP' "
        "GROUP BY c.customer_city ORDER BY pedidos DESC, c.customer_city LIMIT 3"
    )
    answer = f"```sql\n{gold};\n```\nLista as {{}} cidades de SP com mais pedidos de clientes."
    context = {
        "database": database,
        "gold_sql": gold,
        "question": "Quais são as 3 cidades de SP com mais pedidos, e quantos cada uma teve?",
    }
    assert score("sql_qa", answer.format(3), **context).components["wrong_number"] == 0.0
    assert score("sql_qa", answer.format(7), **context).components["wrong_number"] < 0
    # A year or a date is when, not how much: no claim either way.
    dated = answer.format(3) + " Dados de 2017 a 03/11/2018."
    assert score("sql_qa", dated, **context).components["wrong_number"] == 0.0


SECOND = [
    # (the alternative offered after SQL, what the answer keeps)
    ("", 1.0),
    (SQL, 1.0),  # the same query again is a loop (the repetition rule's), not a choice
    (SQL.replace("COUNT(*)", "COUNT(o.order_id)"), 0.7),  # agrees
    ("```sql\nSELECT COUNT(*) FROM orders;\n```", 0.4),  # returns another count
    ("```sql\nSELECT COUNT(*) FROM pedidos;\n```", 0.4),  # does not run
    ("SELECT COUNT(*) FROM orders;", 0.4),  # unfenced, but the database takes it as a query
    ("With this query the count is exact.", 1.0),  # prose, whatever its first word
]


@pytest.mark.parametrize(("alternative", "keeps"), SECOND)
def test_a_second_query_leaves_the_choice_to_the_reader(prepared, alternative, keeps) -> None:
    store, manifest = prepared
    database = store.path(manifest.database)
    answer = (
        f"{SQL}\nOu então:\n{alternative}\nConta os pedidos de clientes de SP."
        if alternative
        else SQL
    )
    # The SQL scorer's own verdict: the loop rules of every task come after it.
    result = sql_qa.score(answer, database=database, gold_sql=GOLD_SQL)
    before = result.total - result.components["second_query"]
    assert result.total == pytest.approx(keeps * before)


def test_a_hostile_second_query_scores_zero(prepared) -> None:
    store, manifest = prepared
    database = store.path(manifest.database)
    answer = f"{SQL}{EXPLANATION}\nOu:\n```sql\nDROP TABLE orders;\n```"
    assert score("sql_qa", answer, database=database, gold_sql=GOLD_SQL).total == 0.0


ANALYSIS = (
    "## Diagnóstico\n- RJ tem atraso de 14,8% e nota 3,6.\n\n## Recomendações\n"
    "1. Priorizar a logística no RJ e revisar transportadoras.\n2. Monitorar o atraso por estado.\n"
    "3. Investir em recompra em SP, onde o cliente está satisfeito."
)
INSIGHTS_CASES = [
    (ANALYSIS, 1.0),
    ("Vendas boas.", 0.3 * 12 / 100 + 0.10),  # 12 of 100 characters, one domain word
    ("O e-commerce cresce muito. " * 100, 0.0),  # 2,700 characters of nothing
    ("", 0.0),
]


@pytest.mark.parametrize(("completion", "expected"), INSIGHTS_CASES)
def test_insights(completion: str, expected: float) -> None:
    assert score("insights", completion).total == pytest.approx(expected, abs=0.02)


SUMMARY = (
    "| estado | pedidos | ticket médio | atraso | nota média |\n|---|---|---|---|---|\n"
    "| SP | 1210 | R$ 118,20 | 4,1% | 4,2 |\n| RJ | 410 | R$ 131,50 | 14,8% | 3,6 |"
)


@pytest.mark.parametrize(
    ("claim", "grounding"),
    [
        ("RJ tem atraso de 14,8% e nota 3,6; SP tem 1.210 pedidos.", 0.10),  # three found
        ("RJ has a 14.8% delay.", 0.10 / 3),  # English notation is read too
        ("RJ tem atraso de 37% e nota 2,1.", -0.50),  # invented
        ("RJ tem atraso de 14,8% e nota 2,1.", 0.10 / 3 - 0.50 / 2),
        ("Sem números aqui.", 0.0),
    ],
)
def test_insights_grounding(claim: str, grounding: float) -> None:
    text = f"## Análise\n- {claim}\n\n## Ações\n1. Recomendo priorizar o RJ."
    result = score("insights", text, data_summary=SUMMARY)
    assert result.components["grounding"] == pytest.approx(grounding)


def test_list_markers_are_not_cited_numbers() -> None:
    text = "1. Priorizar o RJ.\n2. Revisar prazos.\n3. Monitorar."
    assert score("insights", text, data_summary=SUMMARY).components["grounding"] == 0.0


PUSH_CASES = [
    ("Seu jogo de cama chegou? Conta pra gente o que achou e ganhe 10% na próxima compra! ⭐", 1.0),
    ("Prezado cliente, seu pedido foi entregue. Atenciosamente, Equipe.", None),
    ("Olá! " + "Aproveite as novidades da loja para você. " * 8, None),
    ("", 0.0),
]


@pytest.mark.parametrize(("completion", "expected"), PUSH_CASES)
def test_push(completion: str, expected: float | None) -> None:
    result = score("push", completion)
    if expected is not None:
        assert result.total == pytest.approx(expected)
    if "Prezado" in completion:
        assert result.components["formal"] == pytest.approx(-0.20)
    if len(completion) >= 200:
        assert result.components["length"] == 0.0


# Per objective: a notification that does what it asks, and one that ignores it (both short,
# sendable Portuguese, so that the objective is what differs).
OBJECTIVE_CASES = [
    (
        "avisar que o pedido está a caminho",
        "Recife, seu pedido de pet shop já foi despachado e está a caminho! 🐾",
        "Recife, aproveite as ofertas de pet shop desta semana! 🐾",
    ),
    (
        "tranquilizar sobre o prazo de entrega",
        "Fique tranquila, Joana: seu pedido segue dentro do prazo de entrega 📦",
        "Joana, que tal conhecer as novidades em papelaria? 📦",
    ),
    (
        "recuperar o cliente insatisfeito com um cupom",
        "Poxa, Marcos. Queremos te ver de novo: cupom VOLTA20 para a próxima compra 💙",
        "Marcos, conheça os lançamentos de informática da semana 💙",
    ),
    (
        "pedir desculpas e oferecer ajuda",
        "Lamentamos o ocorrido com seu pedido, Ana. Fale com a gente pelo chat e resolvemos 💬",
        "Ana, chegaram novidades em cama, mesa e banho pra você 💬",
    ),
    (
        "pedir uma avaliação da compra",
        "Paulo, sua opinião sobre o fone de ouvido ajuda outros clientes. Deixe sua nota ⭐",
        "Paulo, frete grátis em toda a loja até domingo ⭐",
    ),
    (
        "lembrar de avaliar o produto recebido",
        "Lembrete: falta avaliar a luminária que você recebeu. Leva um minutinho ⭐",
        "A luminária que você comprou tem 10% na próxima compra ⭐",
    ),
    (
        "sugerir uma nova compra na mesma categoria",
        "Carla, descubra os novos perfumes que combinam com a sua última compra 🌸",
        "Carla, obrigado por comprar com a gente 🌸",
    ),
    (
        "oferecer frete grátis na próxima compra",
        "Rita, a próxima entrega é por nossa conta: frete grátis em qualquer pedido 🚚",
        "Rita, confira as novidades de utilidades domésticas 🚚",
    ),
    (
        "reengajar o cliente após o cancelamento",
        "Sentimos sua falta, Bruno! Os brinquedos continuam te esperando na loja 🧸",
        "Bruno, atualizamos nossa política de privacidade 🧸",
    ),
    (
        "trazer o cliente de volta com uma oferta",
        "Bruno, volte pra gente com 15% de desconto em brinquedos 🧸",
        "Bruno, os brinquedos continuam te esperando na loja 🧸",
    ),
]


@pytest.mark.parametrize(("objective", "on", "off"), OBJECTIVE_CASES)
def test_a_push_is_held_to_its_objective(objective: str, on: str, off: str) -> None:
    done = score("push", on, push_objective=objective)
    ignored = score("push", off, push_objective=objective)
    assert done.components["objective"] == done.components["situation"] == 0.0
    assert ignored.components["objective"] < 0
    assert ignored.total < 0.6 * done.total
    # Without the objective (a log line with no context) neither rule applies.
    assert score("push", off).total == pytest.approx(
        ignored.total - ignored.components["objective"]
    )


@pytest.mark.parametrize(
    ("objective", "said"),
    [
        # an order in transit or cancelled has not arrived, and has nothing to review
        ("avisar que o pedido está a caminho", "Seu pedido de pet shop chegou e está a caminho!"),
        ("tranquilizar sobre o prazo de entrega", "Pedido dentro do prazo! Gostou da compra?"),
        ("reengajar o cliente após o cancelamento", "Seu pedido foi entregue! Volte sempre 🧸"),
        ("trazer o cliente de volta com uma oferta", "Seu pedido saiu para entrega! 10% off"),
        # the unhappy customer is no audience for praise-seeking
        ("recuperar o cliente insatisfeito com um cupom", "Adorou? Avalie e ganhe cupom VOLTA10"),
        ("pedir desculpas e oferecer ajuda", "Desculpe! Fale com a gente. Já deu 5 estrelas?"),
        # a four- or five-star customer made no complaint to apologise for
        ("oferecer frete grátis na próxima compra", "Desculpe o transtorno: frete grátis pra você"),
    ],
)
def test_what_the_situation_rules_out_costs(objective: str, said: str) -> None:
    result = score("push", said, push_objective=objective)
    assert result.components["situation"] < 0
    assert result.total <= 0.3 * (result.total - result.components["situation"]) + 1e-9


@pytest.mark.parametrize(
    ("objective", "said"),
    [
        (
            "avisar que o pedido está a caminho",
            "Seu pedido ainda não chegou, mas já está a caminho!",
        ),
        (
            "reengajar o cliente após o cancelamento",
            "Chegou a hora de voltar! Veja as novidades 🧸",
        ),
        (
            "pedir desculpas e oferecer ajuda",
            "Sentimos muito! Vimos sua avaliação, fale com a gente",
        ),
    ],
)
def test_what_the_situation_only_seems_to_rule_out_is_free(objective: str, said: str) -> None:
    assert score("push", said, push_objective=objective).components["situation"] == 0.0


def test_push_objectives_are_data_prep_s() -> None:
    from tasks.prep.push import OBJECTIVES as BY_SITUATION

    drawn = [objective for objectives in BY_SITUATION.values() for objective in objectives]
    assert sorted(drawn) == sorted(push.OBJECTIVES)
    assert all(len(objectives) == 2 for objectives in BY_SITUATION.values())


def _by_name(functions):
    return {fn.__name__: fn for fn in functions}


def test_routing_is_by_task_column_not_text() -> None:
    reengagement = (
        "## Estratégia de reengajamento\n- Recomendo cupom para clientes inativos.\n"
        "- Priorizar o RJ.\n- Acompanhar a recompra de cada cliente."
    )
    functions = _by_name(trl_reward_functions())
    completions = [[{"role": "assistant", "content": reengagement}]] * 2
    tasks = ["insights", "push"]
    as_insights, not_push = functions["insights_reward"](completions, task=tasks)
    assert as_insights == pytest.approx(score("insights", reengagement).total)
    assert not_push is None
    assert functions["push_reward"](completions, task=tasks)[0] is None


def test_trl_adapters_cover_every_task_once() -> None:
    names = [fn.__name__ for fn in trl_reward_functions()]
    assert names == [f"{task}_reward" for task in SCORERS]


def test_components_are_declared_and_gdpo_functions_add_up_to_the_total() -> None:
    component_functions = trl_component_functions()
    assert len(component_functions) == sum(len(c) for c in COMPONENTS.values())
    for row in load_audit_set():
        result = score(row["task"], row["completion"], **row["context"])
        assert set(result.components) <= set(COMPONENTS[row["task"]]), row["id"]
        columns = {key: [value] for key, value in row["context"].items()}
        parts = [
            fn([row["completion"]], task=[row["task"]], **columns)[0] for fn in component_functions
        ]
        summed = sum(p for p in parts if p is not None)
        assert min(1.0, max(0.0, summed)) == pytest.approx(result.total), row["id"]


@pytest.mark.parametrize(
    ("text", "task"),
    [
        (GOOD, "extraction"),
        (SQL + EXPLANATION, "sql_qa"),
        ("Seu pedido chegou! Conta pra gente o que achou 💙", "push"),
        # the seed's bug: an analysis about re-engagement and notifications is not a push
        (
            "## Estratégia de reengajamento\n- Enviar notificação push para clientes inativos.\n"
            "- Recomendo cupom de reengajamento.",
            "insights",
        ),
        ("Reengajamento: " + "analisar a base de clientes inativos e priorizar. " * 6, "insights"),
        ('{"foo": 1, "bar": 2}', "push"),  # some other JSON, short: not an extraction
    ],
)
def test_classifier_for_untyped_input(text: str, task: str) -> None:
    assert classify(text) == task


def test_unknown_task_is_an_error() -> None:
    with pytest.raises(UnknownTaskError, match="churn"):
        score("churn", "x")


def test_every_scorer_reads_only_words_of_the_context_vocabulary() -> None:
    for task, reads in READS.items():
        assert reads <= {*CONTEXT_KEYS, "database"}, task


@pytest.mark.parametrize(
    ("context", "error"),
    [
        ({"review_scor": 1}, "unknown context key 'review_scor'"),  # would have scored 0
        ({"review_score": "5"}, "'review_score' must be int"),
        ({"review_score": True}, "'review_score' must be int"),
        ({"gold_delivered_late": 1}, "'gold_delivered_late' must be bool"),
        ({"review_score": 0}, "'review_score' 0 is not a star count from 1 to 5"),
        # an objective the push reward does not know would hold the notification to nothing
        ({"push_objective": "pedir avaliação"}, "'pedir avaliação' is not an objective"),
    ],
)
def test_a_misspelled_or_mistyped_context_key_is_an_error_everywhere(
    context: dict, error: str
) -> None:
    with pytest.raises(ContextError, match=error):
        score("extraction", GOOD, **context)
    reward = _by_name(trl_reward_functions())["extraction_reward"]
    columns = {key: [value] for key, value in context.items() if key in CONTEXT_KEYS}
    if columns:  # a dataset column outside the vocabulary is no context (prompt_id, order_id)
        with pytest.raises(ContextError, match=error):
            reward([GOOD], task=["extraction"], **columns)
    with pytest.raises(ContextError, match=error):
        prompt_row(prompt_id="p", task="extraction", system="s", user="u", reference="r", **context)


def test_context_a_task_does_not_read_is_ignored() -> None:
    assert score("push", "Seu pedido chegou!", data_summary="x", review_score=5) == score(
        "push", "Seu pedido chegou!"
    )


PUSH = "Seu jogo de cama chegou? Conta pra gente o que achou e ganhe 10% na próxima compra! ⭐"
# One good answer per task (SQL without a database: no execution tiers, same rules).
GOOD_ANSWERS = [
    ("extraction", GOOD, REVIEW),
    ("sql_qa", SQL + EXPLANATION, {"gold_sql": GOLD_SQL}),
    ("insights", ANALYSIS, {}),
    ("push", PUSH, {}),
]


def _looped(answer: str) -> str:
    """Said again and again until the budget cut it mid-copy."""
    return "\n".join([answer] * 4) + "\n" + answer[: len(answer) // 2]


@pytest.mark.parametrize(("task", "answer", "context"), GOOD_ANSWERS)
def test_a_cut_answer_never_scores_above_the_same_answer_ended(task, answer, context) -> None:
    ended = score(task, answer, truncated=False, **context)
    cut = score(task, answer, truncated=True, **context)
    assert cut.total == pytest.approx(CUT_KEEPS[task] * ended.total) and CUT_KEEPS[task] < 1
    assert sum(cut.components.values()) == pytest.approx(cut.total)


@pytest.mark.parametrize(("task", "answer", "context"), GOOD_ANSWERS)
def test_a_looping_answer_earns_less_than_its_first_instance(task, answer, context) -> None:
    once = score(task, answer, **context).total
    looped = score(task, _looped(answer), **context)
    assert looped.total < once - 0.15
    assert looped.components["repetition"] < 0
    cut = score(task, _looped(answer), truncated=True, **context).total
    assert cut < looped.total or cut == looped.total == 0.0


@pytest.mark.parametrize(
    ("text", "once"),
    [
        ("- Priorizar o RJ.\n- Priorizar o RJ.\n- Prior", "- Priorizar o RJ."),
        ("Chegou! Avalie. Chegou! Avalie. Che", "Chegou! Avalie."),
        ("SELECT 1;\n\nSELECT 1;\nExplica.", "SELECT 1;\n\nExplica."),
        ("Sim. Sim e não.", "Sim. Sim e não."),  # a sentence that begins another is no copy
    ],
)
def test_first_instance_drops_copies_and_a_cut_last_copy(text: str, once: str) -> None:
    assert first_instance(text) == once


def test_an_answer_said_once_has_no_repetition() -> None:
    for task, answer, context in GOOD_ANSWERS:
        assert score(task, answer, **context).components["repetition"] == 0.0, task


def test_trl_adapters_read_the_cut_from_completion_ids() -> None:
    """TRL hands each rollout's token ids up to its end of turn: one as long as the budget and
    not ended by the end-of-turn token was cut."""
    end = 9
    budget = TokenBudget(max_tokens=4, end_ids=frozenset({end}))
    push = _by_name(trl_reward_functions(budget=budget))["push_reward"]
    ids = [[1, 2, end], [1, 2, 3, end], [1, 2, 3, 4]]  # short, ended at the limit, cut
    totals = push([PUSH] * 3, task=["push"] * 3, completion_ids=ids)
    assert totals[0] == totals[1] == score("push", PUSH).total
    assert totals[2] == pytest.approx(score("push", PUSH, truncated=True).total)
    assert totals[2] < totals[1]
    # Without a budget (scoring outside training), nothing counts as cut.
    assert _by_name(trl_reward_functions())["push_reward"]([PUSH], task=["push"])[0] == totals[0]


@pytest.mark.parametrize(
    ("completion", "keeps"),
    [
        ("Frete grátis na sua próxima compra! 👕\nOu: sua camisa chega sem frete.", 0.5),
        ("¡Tu pedido llegó! Califícalo ahora y gana un cupón.", 0.25),
        ("PROMOÇÃO!!! COMPRE AGORA!!! CLIQUE AQUI!!!", 0.25),
        ("#oferta #promo #desconto #frete #compras", 0.25),
    ],
)
def test_a_push_must_be_one_sendable_message(completion: str, keeps: float) -> None:
    result = score("push", completion)
    penalties = result.components["several"] + result.components["unsendable"]
    assert result.total == pytest.approx(keeps * (result.total - penalties))


@pytest.mark.parametrize(
    "text",
    ["", "Seu pedido chegou.", PUSH * 4, ANALYSIS, "\n".join([GOOD] * 3) + GOOD[:50]],
)
def test_the_repetition_measure_is_trl_s_on_words(text: str) -> None:
    from trl.rewards import get_repetition_penalty_reward

    vocabulary: dict[str, int] = {}
    ids = [vocabulary.setdefault(word, len(vocabulary)) for word in WORD.findall(fold(text))]
    trl_measure = get_repetition_penalty_reward(ngram_size=REPETITION_NGRAM, max_penalty=-1.0)
    assert repeated_share(text) == pytest.approx(-trl_measure([ids])[0])
