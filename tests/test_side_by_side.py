"""A recipe's `processes`: the seeds' GRPO runs and the evaluations in child processes of one
thread each, on a real Prefect server, against the same pipeline in one process.

A module of its own: the pytest workers run modules side by side, and two pipeline runs here
would lengthen test_pipeline's, the suite's longest.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import torch
import yaml
from prefect.client.orchestration import get_client
from prefect.client.schemas.sorting import FlowRunSort

from flows.pipeline import pipeline_flow, train_flow
from flows.side_by_side import Job, SideBySideFailed, run_side_by_side, whole_rounds
from flows.storage import in_store
from tasks.core.manifests import Adapter
from tasks.core.store import ArtifactStore
from tasks.evaluation.evaluate import adds_nothing

from .conftest import SHIPPED_DATA
from .test_pipeline import SMALL_RECIPE

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]
WEIGHTS = "adapter_model.safetensors"


def _run(root: Path, processes: int) -> tuple[ArtifactStore, dict]:
    config = root / "recipe.yaml"
    root.mkdir()
    recipe = {**json.loads(json.dumps(SMALL_RECIPE)), "processes": processes}
    config.write_text(yaml.safe_dump(recipe))
    store = ArtifactStore(root / "artifacts")
    report = in_store(pipeline_flow, store)(str(config), store.root, str(SHIPPED_DATA))
    return store, store.read_json(report.report_json)


def _flow_runs_named(names: list[str], since: datetime) -> list:
    """Flow runs of these names started since then (the server is the worker's, shared)."""
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(sort=FlowRunSort.ID_DESC, limit=200)
    return [run for run in runs if run.name in names and run.start_time >= since]


def test_side_by_side_seeds_and_evaluations_make_what_one_process_makes(tmp_path: Path) -> None:
    """`processes: 2`: the seeds train, then the models answer the eval split, two at a time,
    each its own flow run on the server; the pipeline goes on with what they left, which is what
    one process makes (one thread on both sides: threads sum floating point in their own order)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        alone, alone_report = _run(tmp_path / "one-process", 1)
        started = datetime.now(UTC)
        side, side_report = _run(tmp_path / "side-by-side", 2)
    finally:
        torch.set_num_threads(threads)
    assert side_report["comparison"] == alone_report["comparison"]
    for mine, theirs in zip(side_report["adapters"], alone_report["adapters"], strict=True):
        assert side.read_bytes(f"{mine['folder']}/{WEIGHTS}") == alone.read_bytes(
            f"{theirs['folder']}/{WEIGHTS}"
        )
    # Each seed trained in a child, as a flow run of its own (no parent), both at once.
    children = [
        run
        for run in _flow_runs_named(["train-seed-1", "train-seed-2"], started)
        if run.parent_task_run_id is None
    ]
    assert sorted(run.name for run in children) == ["train-seed-1", "train-seed-2"]
    first, second = sorted(children, key=lambda run: run.start_time)
    assert second.start_time < first.end_time, "the seeds did not train at the same time"
    # The start model and each seed that changed it answer in a child, in whole rounds of two
    # (an odd one is the pipeline's own); a seed that kept its start gives the start's answers,
    # with no process of its own.
    changed = [
        f"evaluate-seed-{adapter['seed']}"
        for adapter in side_report["adapters"]
        if not adds_nothing(Adapter.model_validate(adapter), side)
    ]
    answering = ["evaluate-start", *changed]
    names = ["evaluate-start", "evaluate-seed-1", "evaluate-seed-2"]
    evaluated = _flow_runs_named(names, started)
    assert sorted(run.name for run in evaluated) == sorted(answering[: len(answering) // 2 * 2])


def test_a_failing_side_by_side_run_stops_the_stage_and_names_itself(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "no-such-recipe.yaml")
    paths = {"config": missing, "artifacts": str(tmp_path / "artifacts"), "data": "unused"}
    with pytest.raises(SideBySideFailed, match=r"train\(config=.*seed=7\) ended with exit status"):
        run_side_by_side([Job(train_flow, {**paths, "seed": 7})], 2)
    # On the terminal, where the children's logs interleave, each line says whose it is.
    relayed = capfd.readouterr().err.splitlines()
    assert any("no-such-recipe.yaml" in line for line in relayed)
    assert all(line.startswith("[seed 7] ") for line in relayed)


def test_a_job_is_labelled_by_its_seed_or_as_the_start_model() -> None:
    assert Job(train_flow, {"config": "c.yaml", "seed": 42}).label() == "seed 42"
    assert Job(train_flow, {"config": "c.yaml", "seed": None}).label() == "start model"


def test_whole_rounds_leave_the_odd_job_to_the_caller() -> None:
    jobs = [Job(train_flow, {"seed": seed}) for seed in (1, 2, 3)]
    assert whole_rounds(jobs, 2) == jobs[:2]
    assert whole_rounds(jobs, 3) == jobs
    assert whole_rounds(jobs[:1], 2) == []
