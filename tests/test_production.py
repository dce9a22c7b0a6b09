"""The production loop: export a merged model, analyse new reviews, watch rewards, retrain on
drift. Real models, the shipped data, a real Prefect server. The analysed reviews are a later
month than the one pipeline run the store holds trained on, as in production."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pandas as pd
import pytest
import yaml

from configs.recipe import load_recipe
from flows.pipeline import read_latest_run
from rewards.review_evidence import ISSUES
from tasks.core.manifests import Adapter
from tasks.core.store import ArtifactStore
from tasks.evaluation.field_agreement import NOT_MEASURED
from tasks.models.model import load_model_and_tokenizer
from tasks.production.analyze import SEEN_ORDER, review_prompts, written_rows
from tasks.production.export import CARD_FILE, export_model
from tasks.production.monitoring import DRIFT
from tasks.training.train import training_records

from .conftest import REPO_ROOT, SHIPPED_DATA, small_training_inputs
from .pipeline_runs import GENERIC_STOP, PipelineRun
from .test_pipeline import SMALL_RECIPE

PROMPT = [{"role": "user", "content": "Produto chegou quebrado, quero meu dinheiro de volta."}]


def _random_adapter(store: ArtifactStore, base, tmp_path: Path) -> Adapter:
    """A LoRA adapter with non-zero B: it changes what the model says."""
    import torch
    from peft import LoraConfig, get_peft_model

    model, _ = load_model_and_tokenizer(base, store)
    torch.manual_seed(0)
    config = LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(tmp_path / "adapter")
    folder = "runs/external/final"
    store.put_dir(tmp_path / "adapter", folder)
    return Adapter(
        fingerprint=store.dir_digest(folder), seed=1, run_key="external", folder=folder,
        log_history="", global_step=0,
    )  # fmt: skip


def _greedy(model, tokenizer) -> list[int]:
    import torch

    text = tokenizer.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=24, do_sample=False)
    return out[0].tolist()


@pytest.mark.slow
def test_export_is_a_plain_model_that_says_what_base_plus_adapter_says(tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    store = ArtifactStore(tmp_path / "store")
    _, base = small_training_inputs(store)
    adapter = _random_adapter(store, base, tmp_path)
    card = {"model": "seed 1", "recipe": "test", "base": base.location, "data_fingerprint": "d"}
    uri = export_model(
        base,
        adapter,
        {**card, "eval_scores": {"push": 0.5}},
        str(tmp_path / "out" / "merged"),
        store,
    )

    exported = Path(uri)
    assert not (exported / "adapter_config.json").exists()
    merged = AutoModelForCausalLM.from_pretrained(exported)
    assert not any("lora" in name for name in merged.state_dict())
    assert json.loads((exported / CARD_FILE).read_text())["eval_scores"] == {"push": 0.5}
    assert "| push | 0.500 |" in (exported / "README.md").read_text()

    model, tokenizer = load_model_and_tokenizer(base, store)
    adapted = PeftModel.from_pretrained(model, str(store.local_dir(adapter.folder)))
    with adapted.disable_adapter():
        plain_base = _greedy(adapted, tokenizer)
    expected = _greedy(adapted, tokenizer)
    assert expected != plain_base  # the adapter matters, so equality below means something
    assert _greedy(merged, AutoTokenizer.from_pretrained(exported)) == expected


# The shipped data's last month: the store's pipeline run trains on the months before it.
LATER_MONTH = "2018-06"
ORDERS, REVIEWS = "olist_orders_dataset.csv", "olist_order_reviews_dataset.csv"
PER_ORDER = ("olist_order_items_dataset.csv", "olist_order_payments_dataset.csv", REVIEWS)
WHOLE = (
    "olist_products_dataset.csv",
    "olist_sellers_dataset.csv",
    "product_category_name_translation.csv",
)
# What a pipeline run leaves; an analysis must add to none of them.
TRAINING_OUTPUTS = ("prepared", "models", "sft", "runs")


def _orders_purchased(target: Path, keep: Callable[[str], bool]) -> Path:
    """The shipped folder cut to the orders whose purchase month (YYYY-MM) `keep` accepts: their
    rows of every per-order table and their customers; products, sellers and category names
    whole, as an export of the shop's database has them."""

    def read(name: str) -> pd.DataFrame:
        return pd.read_csv(SHIPPED_DATA / name, dtype=str, keep_default_na=False)

    target.mkdir(parents=True)
    orders = read(ORDERS)
    orders = orders[orders["order_purchase_timestamp"].str[:7].map(keep)]
    orders.to_csv(target / ORDERS, index=False)
    for name in PER_ORDER:
        table = read(name)
        table[table["order_id"].isin(orders["order_id"])].to_csv(target / name, index=False)
    customers = read("olist_customers_dataset.csv")
    customers = customers[customers["customer_id"].isin(orders["customer_id"])]
    customers.to_csv(target / "olist_customers_dataset.csv", index=False)
    for name in WHOLE:
        shutil.copy(SHIPPED_DATA / name, target / name)
    return target


class Months(NamedTuple):
    before: Path  # what the store's pipeline run trained on
    later: Path  # the next month, every table
    reviews_only: Path  # the next month's reviews file alone


@pytest.fixture(scope="session")
def months(tmp_path_factory: pytest.TempPathFactory) -> Months:
    root = tmp_path_factory.mktemp("months")
    later = _orders_purchased(root / "later", lambda month: month >= LATER_MONTH)
    (root / "reviews-only").mkdir()
    shutil.copy(later / REVIEWS, root / "reviews-only" / REVIEWS)
    before = _orders_purchased(root / "before", lambda month: month < LATER_MONTH)
    return Months(before, later, root / "reviews-only")


def _recipe_dict(**monitoring) -> dict:
    """The pipeline test's recipe cut to one seed and two steps of SFT and of GRPO; evaluation
    in batches of 4, so an analysis writes its rows a few at a time."""
    recipe = json.loads(json.dumps(SMALL_RECIPE))
    recipe["seeds"] = [1]
    recipe["sft"].update(max_steps=2, save_steps=2)
    recipe["training"].update(max_steps=2, save_steps=2, heldout_prompts=4, eval_steps=2)
    recipe["evaluation"].update(batch_size=4)
    recipe["monitoring"] = monitoring
    return recipe


def _recipe(folder: Path, **monitoring) -> str:
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump(_recipe_dict(**monitoring)))
    return str(path)


@pytest.fixture(scope="session")
def pipeline_store(months: Months, prefect_api, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real pipeline run (data, audit, SFT, GRPO, evaluation, report) on the months before
    the later one: the state `make pipeline` leaves, with no champion promoted."""
    from flows.pipeline import pipeline_flow
    from flows.storage import in_store

    root = tmp_path_factory.mktemp("pipeline")
    store = ArtifactStore(root / "store")
    in_store(pipeline_flow, store)(_recipe(root), store.root, str(months.before))
    return Path(store.root)


@pytest.fixture
def trained(pipeline_store: Path, tmp_path: Path) -> ArtifactStore:
    """This test's own copy of the pipeline's store (analyses write records into it)."""
    return ArtifactStore(shutil.copytree(pipeline_store, tmp_path / "store"))


def _training_outputs(store: ArtifactStore) -> dict[str, list[str]]:
    return {name: store.listdir(name) for name in TRAINING_OUTPUTS if store.exists(name)}


def _tucano(*args: str) -> int:
    from flows.cli import main

    return main(list(args))


def _analyze(recipe: str, store: ArtifactStore, data: Path, output: Path, *more: str) -> int:
    return _tucano(
        "analyze", "--recipe", recipe, "--artifacts", str(store.root), "--data", str(data),
        "--output", str(output), *more,
    )  # fmt: skip


def test_a_review_without_its_orders_tables_says_what_is_unavailable(months: Months) -> None:
    with_tables, alone = review_prompts(str(months.later)), review_prompts(str(months.reviews_only))
    # One prompt per commented review either way, the same reviews in the same order.
    assert [p["review_id"] for p in alone] == [p["review_id"] for p in with_tables]
    with_items = set(pd.read_csv(months.later / PER_ORDER[0], dtype=str)["order_id"])
    for prompt in with_tables:
        assert (prompt["missing"] is None) == (prompt["order_id"] in with_items)
    for prompt in alone:
        assert "olist_orders_dataset.csv" in prompt["missing"]["why"]
        assert prompt["missing"]["not_scored"] == ["delivered_late", "product_category"]
        assert prompt["gold_delivered_late"] is None and prompt["gold_category"] is None
        # Unknown, not "não entregue" or "não informada": those would be claims about the order.
        details = prompt["prompt"][1]["content"].split("Dados do pedido:\n")[1].splitlines()
        assert len(details) == 5 and all(line.endswith(": não disponível") for line in details)


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
@pytest.mark.parametrize("model", ["champion", "seed-1", "exported"])
def test_a_later_month_is_read_by_a_model_from_the_store(
    model: str, trained: ArtifactStore, months: Months, tmp_path: Path, capsys
) -> None:
    recipe, run = _recipe(tmp_path), read_latest_run(trained)
    assert run.data == str(months.before) and [a.seed for a in run.adapters] == [1]
    spec, label = {
        "champion": ("champion", f"base model {run.base.location}"),
        "seed-1": ("seed-1", f"seed 1 adapter {run.adapters[0].folder}"),
        "exported": (
            str(tmp_path / "exported"),
            f"exported seed 1 adapter {run.adapters[0].folder}",
        ),
    }[model]
    if model == "exported":
        export = ["export", "--recipe", recipe, "--artifacts", str(trained.root)]
        assert _tucano(*export, "--model", "seed-1", "--to", spec) == 0, capsys.readouterr().err
    made = _training_outputs(trained)
    later_orders = set(pd.read_csv(months.later / ORDERS, dtype=str)["order_id"])

    for folder in (months.later, months.reviews_only):
        output = tmp_path / f"{folder.name}.jsonl"
        code = _analyze(recipe, trained, folder, output, "--model", spec, "--limit", "12")
        assert code == 0, capsys.readouterr().err
        rows = written_rows(output)
        assert len({row["review_id"] for row in rows}) == len(rows) == 12
        assert {row["order_id"] for row in rows} <= later_orders
        assert trained.read_json("monitoring/latest.json")["model"].startswith(label)
        if folder == months.reviews_only:
            assert all("olist_orders_dataset.csv" in row["missing"]["why"] for row in rows)
            assert "Without their order's details (delivery and category gold not scored): 12" in (
                capsys.readouterr().out
            )
    # The analysed months were read, never prepared or trained on.
    assert _training_outputs(trained) == made


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_a_seed_the_latest_run_did_not_train_is_named_with_what_trains_it(
    trained: ArtifactStore, months: Months, tmp_path: Path, capsys
) -> None:
    made = _training_outputs(trained)
    output = tmp_path / "rows.jsonl"
    assert _analyze(_recipe(tmp_path), trained, months.later, output, "--model", "seed-7") == 1
    error = capsys.readouterr().err
    assert "no finished training run of seed 7 (`tucano train --seed 7` trains one)" in error
    assert f"{trained.root} holds the pipeline run of " in error and "seed-1)" in error
    assert _training_outputs(trained) == made and not output.exists()


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_a_model_tucano_train_made_is_named_by_seed_run_key_or_adapter_folder(
    trained: ArtifactStore, months: Months, tmp_path: Path, capsys
) -> None:
    # What `tucano train` leaves: its run, and no pipeline run's record of it.
    trained.fs.rm(trained.path("pipeline/latest.json"))
    (record,) = training_records(trained)
    adapter = record.adapter
    copied = shutil.copytree(trained.path(adapter.folder), tmp_path / "my-adapter")
    recipe = _recipe(tmp_path)
    for spec in ("seed-1", adapter.run_key[:8], trained.path(adapter.folder), str(copied)):
        output = tmp_path / f"rows-{len(spec)}.jsonl"
        code = _analyze(recipe, trained, months.later, output, "--model", spec, "--limit", "4")
        assert code == 0, capsys.readouterr().err
        assert len(written_rows(output)) == 4
        label = trained.read_json("monitoring/latest.json")["model"]
        assert label == f"seed 1 adapter {adapter.folder}", spec

    output = tmp_path / "none.jsonl"
    assert _analyze(recipe, trained, months.later, output, "--model", "seed-9") == 1
    error = capsys.readouterr().err
    assert f"holds seed-1 of `tucano train` (run key {adapter.run_key}," in error
    assert not output.exists()


@pytest.mark.usefixtures("prefect_api")
def test_analysing_with_an_empty_store_says_which_command_makes_a_model(
    months: Months, tmp_path: Path, capsys
) -> None:
    store = ArtifactStore(tmp_path / "store")
    output = tmp_path / "rows.jsonl"
    assert _analyze(_recipe(tmp_path), store, months.reviews_only, output) == 1
    error = capsys.readouterr().err
    assert "--model champion: no model is promoted and no pipeline run has recorded" in error
    assert f"`make pipeline`, `tucano pipeline --artifacts {store.root}` or `tucano train" in error
    assert _training_outputs(store) == {} and not output.exists()


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_analysis_of_a_later_month_resumes_after_a_kill(
    trained: ArtifactStore, months: Months, tmp_path: Path, capsys
) -> None:
    from prefect.settings import PREFECT_API_URL

    recipe, output = _recipe(tmp_path), tmp_path / "rows.jsonl"
    command = [
        sys.executable, "-m", "flows.cli", "analyze", "--recipe", recipe,
        "--artifacts", str(trained.root), "--data", str(months.later),
        "--output", str(output), "--limit", "40",
    ]  # fmt: skip
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PYTHONPATH": str(REPO_ROOT)}
    first = subprocess.Popen(command, cwd=REPO_ROOT, env=env)
    deadline = time.monotonic() + 600

    def complete_lines() -> int:  # read only: the writer is still appending
        return output.read_bytes().count(b"\n") if output.exists() else 0

    while complete_lines() < 8 and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed_at = written_rows(output)
    assert 8 <= len(killed_at) < 40, "the kill must land mid-analysis"

    # Only the killed run needs a process of its own.
    assert _analyze(recipe, trained, months.later, output, "--limit", "40") == 0
    printed = capsys.readouterr().out
    rows = written_rows(output)
    assert len(rows) == len({row["review_id"] for row in rows}) == 40
    assert rows[: len(killed_at)] == killed_at  # kept, not redone

    seen = {
        row.get("order_id")
        for folder in trained.listdir("prepared")
        for file in trained.listdir(f"prepared/{folder}")
        if file.endswith(".jsonl")
        for row in trained.read_jsonl(f"prepared/{folder}/{file}")
    }
    assert not seen & {row["order_id"] for row in rows}  # no trained or eval order analysed
    for row in rows:
        assert (row["parsed"] is None) == (row["parse_error"] is not None)
        assert 0.0 <= row["total"] <= 1.0 and "json" in row["components"]
    assert "| Churn risk | Reviews |" in printed
    assert "## Each field against the review" in printed
    assert "| delivery_issue: flagged where stated |" in printed
    # What each flag can be trusted for, on the model's eval split and on these reviews: the
    # tiny model parses no answer on either, so nothing is measured, and the table says so.
    assert "## What each flag can be trusted for" in printed
    assert "| Flag | its eval split | these reviews |" in printed
    unmeasured = f"{NOT_MEASURED} (stated none; ruled out none)"
    for issue in ISSUES:
        assert f"| {issue} | {unmeasured} | {unmeasured} |" in printed
    assert all(row["review_text"] for row in rows if not row["skipped"])
    assert output.with_suffix(".summary.png").stat().st_size > 0
    # The monitor's status is the one these rows imply: the two-step tiny model writes no JSON
    # object and runs every answer to the budget, so the parse-rate and truncation limits both
    # fail, and one failed check is a drift.
    limits = load_recipe(recipe).monitoring
    parsed = sum(row["parsed"] is not None for row in rows) / len(rows)
    cut = sum(row["truncated"] for row in rows) / len(rows)
    assert parsed < limits.min_parse_rate and cut > limits.max_truncated
    latest = trained.read_json("monitoring/latest.json")
    assert latest["reviews"] == 40 and latest["status"] == DRIFT
    recorded = {check["check"]: check for check in latest["checks"]}
    assert (recorded["parse_rate"]["value"], recorded["truncated"]["value"]) == (parsed, cut)
    assert recorded["parse_rate"]["verdict"] == recorded["truncated"]["verdict"] == "fail"
    # Every check, printed as the decision file has it, against the model's own eval split.
    assert latest["reference_prompts"] == 6  # the recipe's extraction eval prompts
    for check in latest["checks"]:
        assert f"| {check['label']} |" in printed
        assert f"| {check['verdict']} | {check['reason']} |" in printed


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_a_drift_retrains_once_on_the_training_data_not_the_analysed_month(
    trained: ArtifactStore, months: Months, tmp_path: Path
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    from flows.production import analyze_flow
    from flows.storage import in_store

    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("tucano-scheduled-retraining")
        deployment_id = client.create_deployment(
            flow_id=flow_id,
            name="retraining-under-test",
            parameters={"run": {"training_deployment": "somewhere/else", "data": "elsewhere"}},
        )
    # A floor no random-weight model reaches: this analysis is a drift.
    recipe = _recipe(tmp_path, floor=0.99)
    arguments = {
        "output": str(tmp_path / "rows.jsonl"), "recipe_path": recipe,
        "artifacts": str(trained.root), "data": str(months.later), "limit": 8,
        "retraining_deployment": "tucano-scheduled-retraining/retraining-under-test",
    }  # fmt: skip
    # Cached results live in the run's store, as with the command line.
    decisions = [in_store(analyze_flow, trained)(**arguments)["monitoring"] for _ in range(2)]

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment_id]))
        )
    assert len(runs) == 1  # the same drift twice: one retraining
    for decision in decisions:
        assert decision["status"] == DRIFT and "below the floor 0.99" in decision["reason"]
        assert decision["retraining"].startswith(f"flow run {runs[0].id}")
    run = runs[0].parameters["run"]
    assert run["training_deployment"] == "somewhere/else"  # the deployment's own, kept
    # The master data the production model's pipeline trained on, not the month just analysed.
    assert (run["recipe"], run["data"], run["artifacts"]) == (
        recipe,
        str(months.before),
        str(trained.root),
    )
    assert len(trained.listdir("monitoring/decisions")) == 2


@pytest.mark.usefixtures("prefect_api")
def test_analysis_input_without_a_column_is_named(olist_copy: Path, tmp_path: Path, capsys) -> None:
    reviews = olist_copy / REVIEWS
    table = pd.read_csv(reviews, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    table.drop(columns="review_comment_message").to_csv(reviews, index=False)
    output = tmp_path / "rows.jsonl"
    args = ["analyze", "--data", str(olist_copy), "--output", str(output)]
    assert _tucano(*args, "--artifacts", str(tmp_path / "a")) == 1
    error = capsys.readouterr().err
    assert "olist_order_reviews_dataset.csv" in error and "review_comment_message" in error
    assert not output.exists()


@pytest.mark.usefixtures("prefect_api")
def test_exporting_the_champion_before_any_promotion_says_what_to_do(
    tmp_path: Path, capsys
) -> None:
    args = ["export", "--artifacts", str(tmp_path / "a"), "--to", str(tmp_path / "model")]
    assert _tucano(*args) == 1
    assert "(no model promoted yet); export seed-N or an adapter folder" in capsys.readouterr().err
    assert not (tmp_path / "model").exists()


def _commented(reviews: pd.DataFrame) -> pd.DataFrame:
    text = (
        reviews["review_comment_title"].str.strip() + reviews["review_comment_message"].str.strip()
    )
    return reviews[text != ""]


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_every_commented_review_gets_one_row_analysed_or_saying_why_not(
    trained: ArtifactStore, months: Months, tmp_path: Path, capsys
) -> None:
    """Short comments are verdicts, a review id two orders share is a review of each, and a
    review of an order the model saw in training says so instead of vanishing."""
    folder = Path(shutil.copytree(months.later, tmp_path / "month"))
    later = pd.read_csv(folder / REVIEWS, dtype=str, keep_default_na=False)
    commented = _commented(later)
    short = commented[commented["review_comment_message"].str.strip().str.len() < 15]
    chosen = pd.concat([short.head(6), commented.drop(short.index).head(10)])
    shared = chosen.iloc[[-1]].assign(order_id=later["order_id"].iloc[0])  # one text, two orders
    seen_orders = [
        row["order_id"] for row in trained.read_jsonl(read_latest_run(trained).prepared.train)
    ]
    shipped = pd.read_csv(SHIPPED_DATA / REVIEWS, dtype=str, keep_default_na=False)
    seen = _commented(shipped[shipped["order_id"].isin(seen_orders)]).head(3)
    silent = later[later["review_comment_message"].str.strip() == ""].head(5)  # no row for these
    pd.concat([chosen, shared, seen, silent]).to_csv(folder / REVIEWS, index=False)
    output = tmp_path / "rows.jsonl"

    assert _analyze(_recipe(tmp_path), trained, folder, output) == 0, capsys.readouterr().err

    rows = written_rows(output)
    expected = pd.concat([chosen, shared, seen])
    assert sorted((row["order_id"], row["review_id"]) for row in rows) == sorted(
        zip(expected["order_id"], expected["review_id"], strict=True)
    )
    skipped = {row["order_id"]: row["skipped"] for row in rows if row["skipped"]}
    assert skipped == dict.fromkeys(seen["order_id"], SEEN_ORDER)
    for row in rows:
        assert (row.get("completion") is None) == (row["order_id"] in skipped)
    printed = capsys.readouterr().out
    assert f"- Reviews with a comment: 20 (analysed: 17; skipped, {SEEN_ORDER}: 3;" in printed
    assert trained.read_json("monitoring/latest.json")["reviews"] == 17


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
@pytest.mark.parametrize("stage", ["evaluation", "export"])
def test_a_sigterm_mid_evaluation_or_export_leaves_nothing_half_written(
    stage: str, trained: ArtifactStore, months: Months, tmp_path: Path
) -> None:
    exported = tmp_path / "exported"
    args, pause = {
        # A changed evaluation seed: the cached training, a new evaluation.
        "evaluation": (
            ["eval", "--data", str(months.before)],
            "tasks.evaluation.evaluate:generate",
        ),
        "export": (
            ["export", "--model", "seed-1", "--to", str(exported)],
            "tasks.production.export:card_markdown",
        ),
    }[stage]
    recipe = _recipe_dict()
    recipe["evaluation"]["seed"] = int(stage == "evaluation")
    evaluations = trained.listdir("eval")
    run = PipelineRun(
        tmp_path, None, args, recipe=recipe, artifacts=Path(trained.root), pause=pause
    )
    try:
        run.wait_for(f"PAUSED IN {pause}")
        run.its_processes()
        run.stop(signal.SIGTERM, kept=re.escape(GENERIC_STOP.format(trained.root)))
    finally:
        run.end()
    assert trained.listdir("eval") == evaluations and not exported.exists()


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_ctrl_c_mid_analysis_keeps_every_row_written_whole(
    trained: ArtifactStore, months: Months, tmp_path: Path
) -> None:
    output = tmp_path / "rows.jsonl"
    args = ["analyze", "--data", str(months.later), "--output", str(output), "--limit", "40"]
    run = PipelineRun(tmp_path, None, args, recipe=_recipe_dict(), artifacts=Path(trained.root))
    try:
        deadline = time.monotonic() + 300
        while not (output.exists() and output.read_bytes().count(b"\n") >= 4):
            assert run.process.poll() is None and time.monotonic() < deadline, run.output[-3000:]
            time.sleep(0.05)
        said = run.stop(signal.SIGINT, kept=rf"the (\d+) rows written so far are in {output},")
    finally:
        run.end()
    content = output.read_bytes()
    assert content.endswith(b"\n") and 4 <= int(said[1]) == content.count(b"\n") < 40
    assert len(written_rows(output)) == int(said[1])
