"""A recipe's `processes`: the seeds' GRPO runs and the evaluations in child processes of one
thread each, on a real Prefect server. What they make is what the same pipeline makes in one
process; stopped however it is stopped, such a run ends whole within the grace period, and the
same command then ends as the run never interrupted did: SIGTERM while both seeds are in a step
that would last minutes, Ctrl-C, SIGKILL of one child and SIGKILL of the parent alone, in turn,
then the report and adapters of the same pipeline run in one process, uninterrupted.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import torch
import yaml
from prefect.client.orchestration import get_client
from prefect.client.schemas.sorting import FlowRunSort

from flows.pipeline import pipeline_flow, train_flow
from flows.side_by_side import ONE_THREAD, Job, SideBySideFailed, run_side_by_side, whole_rounds
from flows.storage import in_store
from tasks.core.manifests import Adapter
from tasks.core.store import COMPLETE_MARKER, ArtifactStore
from tasks.evaluation.evaluate import adds_nothing

from .conftest import REPO_ROOT, SHIPPED_DATA, complete_checkpoints
from .pipeline_runs import (
    EXIT_BOUND_S,
    GENERIC_STOP,
    PipelineRun,
    command_line,
    terminate,
)
from .test_resume import RECIPE as RESUME_RECIPE

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]
WEIGHTS = "adapter_model.safetensors"
# Enough steps for three interruptions to land in training, a checkpoint after every step; six
# passes over the resume test's 8 train prompts.
SIDE_BY_SIDE = {
    **RESUME_RECIPE,
    "name": "resumed_side_by_side",
    "seeds": [7, 8],
    "processes": 2,
    "training": {**RESUME_RECIPE["training"], "max_steps": 24, "save_steps": 1, "eval_steps": 8},
}


def _pipeline(root: Path, recipe: dict) -> ArtifactStore:
    """The pipeline in this process, on one thread (threads sum floating point in their own
    order), as the side-by-side children each run on one."""
    config = root / "recipe.yaml"
    root.mkdir()
    config.write_text(yaml.safe_dump(recipe))
    store = ArtifactStore(root / "artifacts")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        in_store(pipeline_flow, store)(str(config), store.root, str(SHIPPED_DATA))
    finally:
        torch.set_num_threads(threads)
    return store


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory, prefect_api) -> ArtifactStore:
    """The side-by-side recipe's pipeline in one process, never interrupted: the reference."""
    root = tmp_path_factory.mktemp("one-process") / "run"
    return _pipeline(root, {**SIDE_BY_SIDE, "processes": 1})


def _flow_runs_named(names: list[str], started: datetime, ended: datetime) -> list:
    """Flow runs of these names started between `started` and `ended` (the tests' server is
    shared with other tests of this worker)."""
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(sort=FlowRunSort.ID_DESC, limit=200)
    return [
        run
        for run in runs
        if run.name in names and run.start_time and started <= run.start_time <= ended
    ]


def test_a_failing_side_by_side_run_stops_the_stage_and_names_itself(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "no-such-recipe.yaml")
    paths = {"recipe_path": missing, "artifacts": str(tmp_path / "artifacts"), "data": "unused"}
    with pytest.raises(
        SideBySideFailed, match=r"train\(recipe_path=.*seed=7\) ended with exit status"
    ):
        run_side_by_side([Job(train_flow, {**paths, "seed": 7})], 2)
    # On the terminal, where the children's logs interleave, each line says whose it is.
    relayed = capfd.readouterr().err.splitlines()
    assert any("no-such-recipe.yaml" in line for line in relayed)
    assert all(line.startswith("[seed 7] ") for line in relayed)


def test_a_job_is_labelled_by_its_seed_or_as_the_start_model() -> None:
    assert Job(train_flow, {"recipe_path": "c.yaml", "seed": 42}).label() == "seed 42"
    assert Job(train_flow, {"recipe_path": "c.yaml", "seed": None}).label() == "start model"


def test_whole_rounds_leave_the_odd_job_to_the_caller() -> None:
    jobs = [Job(train_flow, {"seed": seed}) for seed in (1, 2, 3)]
    assert whole_rounds(jobs, 2) == jobs[:2]
    assert whole_rounds(jobs, 3) == jobs
    assert whole_rounds(jobs[:1], 2) == []


# Started in every Python process of a run whose PYTHONPATH has it: GRPO's loss stops on its
# PAUSE_AT_CALL-th call, in each seed's child, and sleeps on: a step far longer than a grace
# period, as a step of the real model on two cores is (35-50 s).
PAUSED_LOSS = """
import os, time
if os.environ.get("TUCANO_TEST_PAUSED_LOSS"):
    import trl
    original, calls = trl.GRPOTrainer.compute_loss, []
    def compute_loss(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == {at}:
            print("PAUSED IN compute_loss", flush=True)
            time.sleep(120)
        return original(self, *args, **kwargs)
    trl.GRPOTrainer.compute_loss = compute_loss
"""
PAUSE_AT_CALL = 6


def _newest_checkpoints(artifacts: Path) -> dict[str, int]:
    """Each training run's newest complete checkpoint step, by run folder."""
    found = complete_checkpoints(ArtifactStore(artifacts))
    return {run: steps[-1] for run, steps in found.items() if steps}


def _both_seeds_past(run: PipelineRun, artifacts: Path, before: dict[str, int]) -> None:
    """Wait until both seeds' runs have a checkpoint newer than `before`'s, or have finished
    (one seed can draw ahead of the other), one of them still training."""
    deadline = time.monotonic() + 300
    while True:
        now = _newest_checkpoints(artifacts)
        done = {name for name in now if (artifacts / "runs" / name / "record.json").exists()}
        moved = [name in done or step > before.get(name, 0) for name, step in now.items()]
        if len(now) == 2 and all(moved) and len(done) < 2:
            return
        assert run.process.poll() is None, f"the run ended first:\n{run.output[-3000:]}"
        assert time.monotonic() < deadline, f"no new checkpoints: {now}\n{run.output[-3000:]}"
        time.sleep(0.1)


def _children_training(run: PipelineRun) -> dict[int, int]:
    """The side-by-side children training a seed, by seed."""
    children = {}
    for pid in run.its_processes():
        command = command_line(pid)
        if "flows.side_by_side" in command and (seed := re.search(r'"seed": (\d+)', command)):
            children[int(seed[1])] = pid
    assert children, f"no child trains a seed: {run.its_processes()}"
    return children


def _report(artifacts: Path) -> dict:
    """The report, less the recipe's fingerprint (the reference's recipe says `processes: 1`),
    its folder's name and each adapter's fingerprint: the digest of its folder, whose config
    names the base model by its path in the store (and lists the LoRA modules in a set's order),
    so one adapter has another fingerprint in another store; its weights are compared apart."""
    (report,) = artifacts.glob("reports/*/report.json")
    report = json.loads(report.read_text())
    del report["config_fingerprint"]
    # The report's folder is named by its inputs, the recipe among them.
    report["plots"] = [Path(plot).name for plot in report["plots"]]
    for adapter in report["adapters"]:
        del adapter["fingerprint"]
    return report


def _adapters(artifacts: Path) -> dict[str, bytes]:
    """Each run's final adapter and the adapter its report names (the best, or the final)."""
    named = [adapter["folder"] for adapter in _report(artifacts)["adapters"]]
    finals = [str(path.relative_to(artifacts)) for path in artifacts.glob("runs/*/final")]
    return {folder: (artifacts / folder / WEIGHTS).read_bytes() for folder in {*named, *finals}}


def _stop_both_in_a_step_of_minutes(run: PipelineRun) -> None:
    """SIGTERM to the run's group while both seeds are in a step that would not end for minutes:
    every process ends within the bound, each seed's newest checkpoint complete and named."""
    deadline = time.monotonic() + 300
    while run.output.count("PAUSED IN compute_loss") < 2:
        assert time.monotonic() < deadline, run.output[-3000:]
        run.wait_for("PAUSED IN compute_loss")
        time.sleep(0.2)
    run.its_processes()
    started = time.monotonic()
    run.stop(signal.SIGTERM, kept=re.escape(GENERIC_STOP.format(run.artifacts)))
    assert time.monotonic() - started < EXIT_BOUND_S
    output = run.output
    for seed in (7, 8):
        said = re.search(
            rf"\[seed {seed}\] .*stopped by SIGTERM; seed {seed}'s checkpoint after step (\d+) "
            r"is in (\S+)", output,
        )  # fmt: skip
        assert said, output[-3000:]
        assert int(said[1]) >= 1
        assert (Path(said[2]) / f"checkpoint-{said[1]}" / COMPLETE_MARKER).is_file()
    assert output.count("abandoned, the newest checkpoint kept") == 2, output[-3000:]


def test_a_side_by_side_run_stopped_every_way_resumes_to_what_one_process_makes(
    one_process: ArtifactStore, tmp_path: Path, prefect_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`processes: 2`: the seeds train in children, each its own flow run on the server, both at
    once. Stopped by SIGTERM while both seeds are in a step that would last minutes (the run on a
    temporary server of its own, as `make pipeline` runs), then by Ctrl-C (the children get
    SIGTERM from the parent), then by a child's SIGKILL (the OOM killer), then by the parent's
    SIGKILL with its children left behind: each time every process ends within the grace
    period. The same command, run again after all four, evaluates the models two at a time and
    ends with the very report and adapters of the pipeline run in one process, never
    interrupted. The command runs on one thread, as the reference did."""
    for name, value in ONE_THREAD.items():
        monkeypatch.setenv(name, value)
    folder = tmp_path / "interrupted"
    folder.mkdir()
    artifacts = folder / "artifacts"

    def again(prefect_home: Path | None = None) -> PipelineRun:
        return PipelineRun(folder, prefect_home, recipe=SIDE_BY_SIDE, artifacts=artifacts)

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(PAUSED_LOSS.replace("{at}", str(PAUSE_AT_CALL)))
    with monkeypatch.context() as paused:
        paused.setenv("TUCANO_TEST_PAUSED_LOSS", "1")
        paused.setenv("PYTHONPATH", os.pathsep.join([str(site), str(REPO_ROOT)]))
        run = again(prefect_home)
    try:
        _stop_both_in_a_step_of_minutes(run)
    finally:
        run.end()

    started = datetime.now(UTC)
    run = again()
    try:
        _both_seeds_past(run, artifacts, _newest_checkpoints(artifacts))
        # Each seed trains in a child of its own, both at once.
        assert sorted(_children_training(run)) == [7, 8]
        run.stop(signal.SIGINT, kept=re.escape(GENERIC_STOP.format(artifacts)))
    finally:
        run.end()
    children = _flow_runs_named(["train-seed-7", "train-seed-8"], started, datetime.now(UTC))
    assert sorted(run.name for run in children if run.parent_task_run_id is None) == [
        "train-seed-7",
        "train-seed-8",
    ]

    run = again()
    try:
        _both_seeds_past(run, artifacts, _newest_checkpoints(artifacts))
        seed, child = next(iter(_children_training(run).items()))
        terminate(run, lambda: os.kill(child, signal.SIGKILL))
        assert run.process.returncode == 1, run.output[-3000:]
        said = re.search(rf"seed={seed}\) ended with exit status -9", run.output)
        assert said, run.output[-3000:]
        assert run.left_after(seconds=5) == []
    finally:
        run.end()

    run = again()
    try:
        _both_seeds_past(run, artifacts, _newest_checkpoints(artifacts))
        run.its_processes()
        run.process.kill()  # the parent alone: its children learn it from the kernel
        run.process.wait()
        assert run.left_after(seconds=EXIT_BOUND_S) == []
    finally:
        run.end()

    started = datetime.now(UTC)
    run = again()
    try:
        assert run.process.wait(timeout=600) == 0, run.output[-3000:]
    finally:
        run.end()
    assert "resuming at step " in run.output
    assert _report(artifacts) == _report(Path(one_process.root))
    assert _adapters(artifacts) == _adapters(Path(one_process.root))
    # The start model and each seed that changed it answer in a child, in whole rounds of two
    # (an odd one is the pipeline's own); a seed that kept its start gives the start's answers,
    # with no process of its own.
    report = json.loads(next(artifacts.glob("reports/*/report.json")).read_text())
    store = ArtifactStore(artifacts)
    changed = [
        f"evaluate-seed-{adapter['seed']}"
        for adapter in report["adapters"]
        if not adds_nothing(Adapter.model_validate(adapter), store)
    ]
    answering = ["evaluate-start", *changed]
    names = ["evaluate-start", "evaluate-seed-7", "evaluate-seed-8"]
    evaluated = _flow_runs_named(names, started, datetime.now(UTC))
    assert sorted(run.name for run in evaluated) == sorted(answering[: len(answering) // 2 * 2])
