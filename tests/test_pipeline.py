"""The whole DAG on a real (temporary) Prefect server, on the shipped Olist data, on CPU.

One small recipe runs the pipeline end to end with real data prep, real GRPO steps, real
generation, real scoring and real statistics; a second run with nothing changed must come
entirely from the cache (the audit from the machine's kept audits, its table published again); a
third run with one eval setting changed must recompute only eval.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import yaml
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    ArtifactFilterKey,
    FlowRunFilter,
    FlowRunFilterId,
    FlowRunFilterParentFlowRunId,
)
from prefect.client.schemas.sorting import ArtifactSort, FlowRunSort, TaskRunSort
from scipy.stats import rankdata, wilcoxon

import rewards
from flows.pipeline import data_flow, pipeline_flow, train_flow
from flows.storage import in_store
from rewards import TASKS
from tasks.core.store import ArtifactStore
from tasks.evaluation import audit
from tasks.evaluation.audit import AuditFailed

from .conftest import SHIPPED_DATA, code_edited

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]

# Every stage whose result Prefect caches, in DAG order (the report last). The reward audit runs
# each time, from the result the machine keeps (`tasks.evaluation.audit.kept_audit`).
CACHED_STAGES = (
    "prepare-data",
    "prepare-base-model",
    "sft",
    "train-seed",
    "evaluate-model",
    "report",
)

SMALL_RECIPE = {
    "name": "test_tiny",
    "seeds": [1, 2],
    "data": {
        "train_size": 120,
        "eval_per_task": {"extraction": 6, "sql_qa": 6, "insights": 5, "push": 5},
    },
    "model": {
        "source": "tiny",
        "tiny": {
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "intermediate_size": 128,
            "tokenizer_vocab_size": 1024,
        },
    },
    # SFT on the reference answers, for real, but only a few steps of it.
    "sft": {
        "enabled": True,
        "full_finetune": True,
        "learning_rate": 1e-3,
        "max_steps": 4,
        "save_steps": 2,
        "batch_size": 4,
        "max_length": 1024,
    },
    "training": {
        "learning_rate": 5e-4,
        "num_generations": 4,
        "prompts_per_step": 2,
        "max_completion_length": 24,
        "max_steps": 4,
        "save_steps": 2,
        # The held-out eval still runs and picks the adapter, on 4 prompts: the default 32
        # (x 4 samples) generate as much as 16 of these steps, in every training run that uses
        # this recipe (the pipeline, deployments and S3 tests).
        "heldout_prompts": 4,
    },
    "evaluation": {"max_new_tokens": 24, "batch_size": 22},
}


def _write_recipe(path: Path, **overrides: dict) -> str:
    recipe = json.loads(json.dumps(SMALL_RECIPE))
    for section, values in overrides.items():
        recipe[section].update(values)
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


def _task_states(flow_state, settle_seconds: float = 30.0) -> dict[str, list[str]]:
    """Task-run state names of a flow run and its subflow runs, by task-run name.

    Prefect 3 records task-run states through its events pipeline, asynchronously: right after a
    flow returns, some runs may not be recorded in their final state yet. Poll until they are.
    """
    deadline = time.monotonic() + settle_seconds
    previous: dict[str, list[str]] | None = None
    while True:
        runs = _read_task_runs(flow_state.state_details.flow_run_id)
        states: dict[str, list[str]] = defaultdict(list)
        for run in runs:  # a run just created may have no state recorded yet
            states[run.name].append(run.state.name if run.state else "(none yet)")
        settled = all(run.state and run.state.is_final() for run in runs) and states == previous
        if settled or time.monotonic() > deadline:
            return states
        previous = states
        time.sleep(0.5)


def subflow_ids(parent) -> list:
    """The flow runs started inside `parent` (its subflows)."""
    with get_client(sync_client=True) as client:
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent])
            ),
            sort=FlowRunSort.ID_DESC,
            limit=200,
        )
    return [run.id for run in children]


def _read_task_runs(root):
    ids = [root, *subflow_ids(root)]
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)),
            sort=TaskRunSort.ID_DESC,
            limit=200,
        )
    return runs


def _states_of(states: dict[str, list[str]], prefix: str) -> list[str]:
    return [name for task, names in states.items() if task.startswith(prefix) for name in names]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline")
    config = _write_recipe(root / "recipe.yaml")
    store = ArtifactStore(root / "artifacts")
    state = in_store(pipeline_flow, store)(config, store.root, str(SHIPPED_DATA), return_state=True)
    return root, config, store, state


def test_pipeline_writes_a_complete_report(first_run) -> None:
    _, _, store, state = first_run
    report_artifact = state.result()
    report = store.read_json(report_artifact.report_json)
    assert report["seeds"] == [1, 2]
    for results in [report["comparison"]["pooled"], *report["comparison"]["per_seed"].values()]:
        assert set(results) == {*TASKS, "overall"}
        for entry in results.values():
            for key in ("n", "start_mean", "tuned_mean", "delta", "statistic", "effect_size"):
                assert entry[key] is not None, key
            # A p-value, or the reason there is none (too few nonzero pairs to reach alpha).
            assert entry["note"] if entry["p_value"] is None else 0.0 <= entry["p_value"] <= 1.0
    assert results["overall"]["n"] == 22
    markdown = store.read_text(report_artifact.report_md)
    assert "| **OVERALL** | 22 |" in markdown
    assert len(report["plots"]) == 3
    # The base model against the SFT model GRPO started from, in its own section.
    assert report["start_model"]["source"] == "sft"
    assert set(report["sft"]["comparison"]) == {*TASKS, "overall"}
    assert set(report["sft"]["generation"]) == {"base model", "SFT model"}
    assert "## Base model -> SFT model (the model GRPO starts from)" in markdown
    # Each extraction field against the review's reading, per model.
    assert set(report["fields"]) == {"base model", "SFT model", "seed 1", "seed 2"}
    assert "## Extraction: each field against the review's reading" in markdown
    # What each issue flag can be trusted for, a column per model.
    assert "## Extraction: what each issue flag can be trusted for" in markdown
    assert "| Flag | base model | SFT model | seed 1 | seed 2 |" in markdown
    for path in report["plots"]:
        assert store.read_bytes(path).startswith(b"\x89PNG")  # a real PNG
        assert f"]({path.rsplit('/', 1)[1]})" in markdown
    # How long each stage took, in the order the run went through them.
    stages = dict(store.read_json("pipeline/latest.json")["stage_seconds"])
    assert list(stages) == [
        "data prep", "reward audit", "base model and SFT", "GRPO", "evaluation", "report",
    ]  # fmt: skip
    assert all(seconds >= 0 for seconds in stages.values()) and stages["GRPO"] > 1


def _artifacts(flow_state, *keys: str) -> dict[str, list]:
    """The artifacts a flow run published, newest first, by key (other tests publish under the
    same keys)."""
    with get_client(sync_client=True) as client:
        return {
            key: client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    key=ArtifactFilterKey(any_=[key]),
                    flow_run_id=ArtifactFilterFlowRunId(
                        any_=[flow_state.state_details.flow_run_id]
                    ),
                ),
                sort=ArtifactSort.ID_DESC,
                limit=5,
                offset=0,
            )
            for key in keys
        }


def test_report_and_audit_are_published_as_prefect_artifacts(first_run) -> None:
    _, _, store, state = first_run
    by_key = _artifacts(
        state,
        "tucano-comparison",
        "tucano-report",
        "tucano-reward-audit",
        "tucano-plot-start-vs-tuned",
    )
    table = json.loads(by_key["tucano-comparison"][0].data)
    assert {row["task"] for row in table} == {*TASKS, "overall"}
    assert store.uri(state.result().report_json) in by_key["tucano-report"][0].data
    plot = state.result().plots[0]
    assert (
        by_key["tucano-plot-start-vs-tuned"][0].data
        == f"[start vs tuned](file://{store.uri(plot)})"
    )
    audit_table = json.loads(by_key["tucano-reward-audit"][0].data)
    assert {row["check"] for row in audit_table} >= set(TASKS)


def _rank_biserial(differences: np.ndarray) -> float:
    nonzero = differences[differences != 0]
    ranks = rankdata(np.abs(nonzero))
    return (ranks[nonzero > 0].sum() - ranks[nonzero < 0].sum()) / ranks.sum()


def _holm(p_values: dict[str, float]) -> dict[str, float]:
    ordered = sorted(p_values, key=p_values.get)
    adjusted, running = {}, 0.0
    for i, task in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - i) * p_values[task]))
        adjusted[task] = running
    return adjusted


def _check_against_scores(entries: dict, base: dict, tuned: dict[str, float]) -> None:
    """One comparison (pooled or one seed) recomputed from per-sample scores."""
    rng = np.random.default_rng(1)  # not the report's bootstrap seed: an independent estimate
    for task in (*TASKS, "overall"):
        ids = [pid for pid, row in base.items() if task == "overall" or row["task"] == task]
        b = np.array([base[pid]["total"] for pid in ids])
        t = np.array([tuned[pid] for pid in ids])
        entry = entries[task]
        assert entry["n"] == len(ids)
        assert entry["start_mean"] == pytest.approx(b.mean())
        assert entry["tuned_mean"] == pytest.approx(t.mean())
        if np.any(t != b):
            assert entry["effect_size"] == pytest.approx(_rank_biserial(t - b))
        means = rng.choice(t - b, size=(20_000, len(ids))).mean(axis=1)
        assert entry["ci_low"] == pytest.approx(np.percentile(means, 2.5), abs=0.01)
        assert entry["ci_high"] == pytest.approx(np.percentile(means, 97.5), abs=0.01)
        if not np.any(t != b):
            # scipy has no p for all-zero differences (NaN); the report says "no change".
            assert (entry["p_value"], entry["p_worse"]) == (1.0, 1.0)
        elif entry["p_value"] is not None:
            expected = wilcoxon(t, b, alternative="greater")
            assert entry["statistic"] == pytest.approx(expected.statistic)
            assert entry["p_value"] == pytest.approx(expected.pvalue)
            worse = wilcoxon(t, b, alternative="less")
            assert entry["p_worse"] == pytest.approx(worse.pvalue)
    for raw, corrected in (("p_value", "p_holm"), ("p_worse", "p_worse_holm")):
        tested = {task: entries[task][raw] for task in TASKS if entries[task][raw] is not None}
        for task, adjusted in _holm(tested).items():
            assert entries[task][corrected] == pytest.approx(adjusted)


def test_report_agrees_with_a_recomputation_from_the_saved_scores(first_run) -> None:
    _, _, store, state = first_run
    report_artifact = state.result()
    report = store.read_json(report_artifact.report_json)
    scores = store.read_jsonl(report_artifact.scores)
    # The start model's rows are named for what it is: the SFT model.
    base = {row["prompt_id"]: row for row in scores if row["model"] == "sft"}
    by_seed: dict[int, dict[str, dict]] = defaultdict(dict)
    for row in scores:
        if row["model"] != "sft":
            by_seed[row["seed"]][row["prompt_id"]] = row
    assert len(base) == 22 and sorted(by_seed) == [1, 2]
    comparison = report["comparison"]
    pooled = {pid: np.mean([by_seed[s][pid]["total"] for s in by_seed]) for pid in base}
    _check_against_scores(comparison["pooled"], base, pooled)
    for seed, rows in by_seed.items():
        tuned = {pid: row["total"] for pid, row in rows.items()}
        _check_against_scores(comparison["per_seed"][str(seed)], base, tuned)
    for task, summary in comparison["across_seeds"].items():
        deltas = [comparison["per_seed"][str(seed)][task]["delta"] for seed in by_seed]
        assert summary["delta_mean"] == pytest.approx(np.mean(deltas))
        assert summary["delta_std"] == pytest.approx(np.std(deltas, ddof=1))
    for model, rows in [("SFT model", base), *((f"seed {s}", r) for s, r in by_seed.items())]:
        overall = report["generation"][model]["overall"]
        assert overall["mean_tokens"] == pytest.approx(
            np.mean([r["tokens"] for r in rows.values()])
        )
        truncated = np.mean([r["truncated"] for r in rows.values()])
        assert overall["truncated_share"] == pytest.approx(truncated)
    drops = sorted(
        row["total"] - base[pid]["total"] for rows in by_seed.values() for pid, row in rows.items()
    )
    worst = report["worst_regressions"]
    assert [w["delta"] for w in worst] == pytest.approx([d for d in drops if d < 0][: len(worst)])
    markdown = store.read_text(report_artifact.report_md)
    assert "## Answer lengths and truncation" in markdown and "## Worst regressions" in markdown


def test_every_seed_trained_real_grpo_steps_with_checkpoints_in_the_store(first_run) -> None:
    _, _, store, state = first_run
    report = store.read_json(state.result().report_json)
    for adapter in report["adapters"]:
        assert adapter["global_step"] == 4
        history = store.read_json(adapter["log_history"])
        assert [h["step"] for h in history if "reward" in h] == [1, 2, 3, 4]
        run = adapter["folder"].rsplit("/", 1)[0]
        assert store.is_complete(f"{run}/checkpoints/checkpoint-2")
        assert store.is_complete(f"{run}/checkpoints/checkpoint-4")
        assert store.is_complete(adapter["folder"])


def test_second_run_with_nothing_changed_comes_from_the_cache(first_run, monkeypatch) -> None:
    _, config, store, first = first_run

    def scored_again(*_, **__):
        raise AssertionError("the audit was scored again with nothing it reads changed")

    monkeypatch.setattr(audit, "audit_rewards", scored_again)
    second = in_store(pipeline_flow, store)(
        config, store.root, str(SHIPPED_DATA), return_state=True
    )
    assert second.result() == first.result()
    states = _task_states(second)
    for prefix in CACHED_STAGES:
        assert _states_of(states, prefix), prefix
        assert set(_states_of(states, prefix)) == {"Cached"}, prefix
    # The gate ran (the pipeline's and each seed's flow run's), from the kept result, and the
    # run's page shows the table it judged by.
    assert set(_states_of(states, "reward-audit")) == {"Completed"}
    table = json.loads(_artifacts(second, "tucano-reward-audit")["tucano-reward-audit"][0].data)
    assert {row["check"] for row in table} >= set(TASKS)


def test_editing_code_a_task_runs_recomputes_that_task_alone(
    first_run, tmp_path: Path, monkeypatch
) -> None:
    """The report runs tasks.evaluation.eval_summary, which the hand-kept module lists had left
    out: an edit there must recompute the report, and nothing that does not run it."""
    _, config, store, _ = first_run
    with code_edited(tmp_path / "project", monkeypatch, "tasks/evaluation/eval_summary.py"):
        state = in_store(pipeline_flow, store)(
            config, store.root, str(SHIPPED_DATA), return_state=True
        )
    states = _task_states(state)
    assert set(_states_of(states, "report")) == {"Completed"}
    for prefix in CACHED_STAGES[:-1]:
        assert set(_states_of(states, prefix)) == {"Cached"}, prefix


def test_changing_an_eval_setting_recomputes_only_evaluation(first_run) -> None:
    """Also without the raw model's evaluation (`evaluation.before_sft: false`): the SFT model
    and the two seeds are evaluated, and the report has no base model -> SFT model
    section."""
    root, _, store, _ = first_run
    config = _write_recipe(
        root / "hotter.yaml", evaluation={"temperature": 0.7, "before_sft": False}
    )
    state = in_store(pipeline_flow, store)(config, store.root, str(SHIPPED_DATA), return_state=True)
    states = _task_states(state)
    for prefix in CACHED_STAGES[:-2]:
        assert set(_states_of(states, prefix)) == {"Cached"}, prefix
    assert _states_of(states, "evaluate-model") == ["Completed"] * 3
    report = store.read_json(state.result().report_json)
    assert report["sft"] is None
    markdown = store.read_text(state.result().report_md)
    assert "Base model -> SFT model" not in markdown
    # The model GRPO started from is still the SFT model, named so in the rows and the report.
    assert "- GRPO's start model, the SFT model:" in markdown
    assert {row["model"] for row in store.read_jsonl(state.result().scores)} == {
        "sft",
        "seed-1",
        "seed-2",
    }


def test_data_cache_follows_content_not_location(first_run, olist_copy: Path) -> None:
    _, config, store, _ = first_run
    data_in_store = in_store(data_flow, store)
    moved = data_in_store(config, store.root, str(olist_copy), return_state=True)
    assert _states_of(_task_states(moved), "prepare-data") == ["Cached"]
    with (olist_copy / "olist_sellers_dataset.csv").open("a", encoding="utf-8") as handle:
        handle.write("ffffffffffffffffffffffffffffffff,01001,sao paulo,SP\n")
    changed = data_in_store(config, store.root, str(olist_copy), return_state=True)
    assert _states_of(_task_states(changed), "prepare-data") == ["Completed"]


def test_a_failed_training_task_is_retried_and_resumes_from_its_checkpoint(
    first_run, tmp_path: Path, monkeypatch, caplog
) -> None:
    """GRPO crashes at step 3 of a new seed; the training task is retried at once and resumes from
    checkpoint 2. On the first run's store, so that data, audit, model and SFT come from its
    cache and the crash lands in GRPO, not in SFT (which logs its steps the same way)."""
    from tasks.training import grpo_callbacks
    from tasks.training.train import train_seed_task

    original = grpo_callbacks.LogSteps.on_log
    crashed = []

    def crash_once_at_step_3(self, args, state, control, logs=None, **kwargs):
        if state.global_step == 3 and not crashed:
            crashed.append(3)
            raise RuntimeError("simulated worker crash at step 3")
        return original(self, args, state, control, logs=logs, **kwargs)

    monkeypatch.setattr(grpo_callbacks.LogSteps, "on_log", crash_once_at_step_3)
    monkeypatch.setattr(train_seed_task, "retry_delay_seconds", 0)
    _, _, store, _ = first_run
    config = _write_recipe(tmp_path / "recipe.yaml", training={"max_steps": 4, "save_steps": 2})
    with caplog.at_level("INFO", logger="tucano"):
        adapter = in_store(train_flow, store)(config, store.root, str(SHIPPED_DATA), seed=3)
    assert crashed == [3]
    grpo = [record.getMessage() for record in caplog.records if record.name == "tucano.train"]
    assert any("training seed 3" in line and "resuming at step 2" in line for line in grpo), grpo
    assert not any(record.name == "tucano.sft" for record in caplog.records)  # from the cache
    assert adapter.global_step == 4


def test_a_failing_audit_stops_the_pipeline_before_training(tmp_path: Path, monkeypatch) -> None:
    # The seed's pre-hotfix push reward: longer is better, formal letters welcome.
    monkeypatch.setitem(
        rewards.SCORERS, "push", lambda text, **_: rewards.Score(min(1.0, len(text) / 300))
    )
    config = _write_recipe(tmp_path / "recipe.yaml")
    store = ArtifactStore(tmp_path / "artifacts")
    with pytest.raises(AuditFailed, match="push: Spearman rho"):
        in_store(pipeline_flow, store)(config, store.root, str(SHIPPED_DATA))
    assert not store.exists("runs") and not store.exists("models")
