"""The production loop: export a merged model, analyse new reviews, watch rewards, retrain on
drift. Real models, the shipped data, a real Prefect server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from configs.recipe import MonitoringConfig
from tasks.core.manifests import Adapter
from tasks.core.store import ArtifactStore
from tasks.production.analyze import written_rows
from tasks.production.export import CARD_FILE, export_model
from tasks.production.monitoring import DRIFT, HEALTHY, drift_decision
from tasks.training.model import load_model_and_tokenizer

from .conftest import REPO_ROOT, SHIPPED_DATA, small_training_inputs
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


@pytest.mark.parametrize(
    ("rewards", "reference", "drop_test", "status", "because"),
    [
        ([0.8, 0.7, 0.9] * 10, [0.8, 0.7, 0.9] * 10, True, HEALTHY, "no significant drop"),
        ([0.3, 0.4, 0.35] * 10, [0.3, 0.4, 0.35] * 10, True, DRIFT, "below the floor 0.50"),
        ([0.6, 0.62, 0.58] * 10, [0.9, 0.92, 0.88] * 10, True, DRIFT, "significantly lower"),
        ([0.6, 0.62, 0.58] * 10, [0.9, 0.92, 0.88] * 10, False, HEALTHY, "at or above the floor"),
    ],
    ids=["same-level", "under-floor", "significant-drop", "drop-test-off"],
)
def test_drift_rule(rewards, reference, drop_test, status, because) -> None:
    config = MonitoringConfig(floor=0.5, drop_test=drop_test)
    decision = drift_decision(rewards, reference, config, alpha=0.05)
    assert decision["status"] == status
    assert because in decision["reason"]
    assert (decision["p_drop"] is None) == (not drop_test)


def _recipe(tmp_path: Path, **monitoring) -> str:
    recipe = json.loads(json.dumps(SMALL_RECIPE))
    recipe["evaluation"].update(batch_size=4)
    recipe["monitoring"] = monitoring
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_analysis_of_the_shipped_data_resumes_after_a_kill(tmp_path: Path) -> None:
    from prefect.settings import PREFECT_API_URL

    recipe, artifacts, output = _recipe(tmp_path), tmp_path / "store", tmp_path / "rows.jsonl"
    command = [
        sys.executable, "-m", "flows.cli", "analyze", "--config", recipe,
        "--artifacts", str(artifacts), "--data", str(SHIPPED_DATA),
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

    finished = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr[-3000:]
    rows = written_rows(output)
    assert len(rows) == len({row["review_id"] for row in rows}) == 40
    assert rows[: len(killed_at)] == killed_at  # kept, not redone

    store = ArtifactStore(artifacts)
    prepared = [name for name in store.listdir("prepared")]
    seen = {
        row.get("order_id")
        for folder in prepared
        for file in store.listdir(f"prepared/{folder}")
        if file.endswith(".jsonl")
        for row in store.read_jsonl(f"prepared/{folder}/{file}")
    }
    assert not seen & {row["order_id"] for row in rows}  # no trained or eval order analysed
    for row in rows:
        assert (row["parsed"] is None) == (row["parse_error"] is not None)
        assert 0.0 <= row["total"] <= 1.0 and "json" in row["components"]
    assert "Parsed into the 10 fields" in finished.stdout
    assert "| Churn risk | Reviews |" in finished.stdout
    assert output.with_suffix(".summary.png").stat().st_size > 0
    latest = store.read_json("monitoring/latest.json")
    assert latest["reviews"] == 40 and latest["status"] in (HEALTHY, DRIFT)


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_api")
def test_a_drift_starts_exactly_one_scheduled_retraining_run(tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    from flows.production import analyze_flow
    from flows.storage import in_store

    with get_client(sync_client=True) as client:
        flow_id = client.create_flow_from_name("tucano-scheduled-retraining")
        deployment_id = client.create_deployment(
            flow_id=flow_id,
            name="retraining-under-test",
            parameters={"run": {"training_deployment": "somewhere/else"}},
        )
    # A floor no random-weight model reaches: this analysis is a drift.
    recipe, store = _recipe(tmp_path, floor=0.99), ArtifactStore(tmp_path / "store")
    arguments = {
        "output": str(tmp_path / "rows.jsonl"), "config": recipe, "artifacts": str(store.root),
        "data": str(SHIPPED_DATA), "limit": 8,
        "retraining_deployment": "tucano-scheduled-retraining/retraining-under-test",
    }  # fmt: skip
    # Cached results live in the run's store, as with the command line.
    decisions = [in_store(analyze_flow, store)(**arguments)["monitoring"] for _ in range(2)]

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
    assert (run["recipe"], run["data"], run["artifacts"]) == (
        recipe,
        str(SHIPPED_DATA),
        str(store.root),
    )
    assert len(store.listdir("monitoring/decisions")) == 2


@pytest.mark.usefixtures("prefect_api")
def test_analysis_input_without_a_column_is_named(olist_copy: Path, tmp_path: Path, capsys) -> None:
    import pandas as pd

    from flows.cli import main

    reviews = olist_copy / "olist_order_reviews_dataset.csv"
    table = pd.read_csv(reviews, dtype=str, keep_default_na=False, encoding="utf-8-sig")
    table.drop(columns="review_comment_message").to_csv(reviews, index=False)
    output = tmp_path / "rows.jsonl"
    args = ["analyze", "--data", str(olist_copy), "--output", str(output)]
    assert main([*args, "--artifacts", str(tmp_path / "a")]) == 1
    error = capsys.readouterr().err
    assert "olist_order_reviews_dataset.csv" in error and "review_comment_message" in error
    assert not output.exists()


@pytest.mark.usefixtures("prefect_api")
def test_exporting_the_champion_before_any_promotion_says_what_to_do(
    tmp_path: Path, capsys
) -> None:
    from flows.cli import main

    args = ["export", "--artifacts", str(tmp_path / "a"), "--to", str(tmp_path / "model")]
    assert main(args) == 1
    assert "(no model promoted yet); export seed-N or an adapter folder" in capsys.readouterr().err
    assert not (tmp_path / "model").exists()
