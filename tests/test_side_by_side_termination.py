"""A run whose seeds train side by side (`processes: 2`) ends whole within the grace period
however it is stopped, and the same command then ends as a run never interrupted would: SIGTERM
while both seeds are in a step that would last minutes; Ctrl-C, SIGKILL of one child and SIGKILL
of the parent alone in turn, then the report and adapters of an uninterrupted run."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from tasks.core.store import COMPLETE_MARKER, ArtifactStore

from .conftest import REPO_ROOT, complete_checkpoints
from .pipeline_runs import (
    EXIT_BOUND_S,
    GENERIC_STOP,
    RECIPE,
    PipelineRun,
    command_line,
    terminate,
)
from .test_resume import RECIPE as RESUME_RECIPE

pytestmark = pytest.mark.slow

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
SIDE_BY_SIDE_RECIPE = {
    **RECIPE,
    "name": "termination_side_by_side",
    "seeds": [7, 8],
    "processes": 2,
    "training": {**RECIPE["training"], "save_steps": 1},
}


def test_seeds_side_by_side_stop_within_the_grace_period_with_their_last_step_kept(
    tmp_path: Path, prefect_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both seeds in a step that would not end for minutes: SIGTERM to the run's group ends
    every process within the bound, each seed's newest checkpoint complete and named. (Ctrl-C to
    a side-by-side run: the next test.)"""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(PAUSED_LOSS.replace("{at}", str(PAUSE_AT_CALL)))
    monkeypatch.setenv("TUCANO_TEST_PAUSED_LOSS", "1")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(REPO_ROOT)]))
    run = PipelineRun(tmp_path, prefect_home, recipe=SIDE_BY_SIDE_RECIPE)
    try:
        deadline = time.monotonic() + 300
        while run.output.count("PAUSED IN compute_loss") < 2:
            assert time.monotonic() < deadline, run.output[-3000:]
            run.wait_for("PAUSED IN compute_loss")
            time.sleep(0.2)
        run.its_processes()
        started = time.monotonic()
        run.stop(signal.SIGTERM, kept=re.escape(GENERIC_STOP.format(run.artifacts)))
        assert time.monotonic() - started < EXIT_BOUND_S
    finally:
        run.end()
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


# Enough steps for three interruptions to land in training, a checkpoint after every step.
RESUMED_RECIPE = {
    **RESUME_RECIPE,
    "name": "resumed_side_by_side",
    "seeds": [7, 8],
    "processes": 2,
    "training": {**RESUME_RECIPE["training"], "max_steps": 24, "save_steps": 1, "eval_steps": 8},
}


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


def _child_training(run: PipelineRun) -> tuple[int, int]:
    """A side-by-side child training a seed, and its seed."""
    for pid in run.its_processes():
        command = command_line(pid)
        if "flows.side_by_side" in command and (seed := re.search(r'"seed": (\d+)', command)):
            return pid, int(seed[1])
    raise AssertionError(f"no child trains a seed: {run.its_processes()}")


def _report(artifacts: Path) -> dict:
    """The report, less each adapter's fingerprint: the digest of its folder, whose config names
    the base model by its path in the store (and lists the LoRA modules in a set's order), so
    one adapter has another fingerprint in another store; its weights are compared apart."""
    (report,) = artifacts.glob("reports/*/report.json")
    report = json.loads(report.read_text())
    for adapter in report["adapters"]:
        del adapter["fingerprint"]
    return report


def _final_adapters(artifacts: Path) -> dict[str, bytes]:
    return {
        path.parents[1].name: path.read_bytes()
        for path in artifacts.glob("runs/*/final/adapter_model.safetensors")
    }


@pytest.mark.usefixtures("prefect_api")
def test_a_side_by_side_run_stopped_every_way_resumes_to_the_uninterrupted_report(
    tmp_path: Path,
) -> None:
    """Seeds side by side, stopped by Ctrl-C (the children get SIGTERM from the parent), then by a
    child's SIGKILL (the OOM killer), then by the parent's SIGKILL with its children left behind:
    each time every process ends within the grace period, and the same command, run again after
    all three, ends with the very report and adapters of a run never interrupted."""
    (tmp_path / "reference").mkdir()
    reference = PipelineRun(tmp_path / "reference", None, recipe=RESUMED_RECIPE)
    try:
        assert reference.process.wait(timeout=600) == 0, reference.output[-3000:]
    finally:
        reference.end()

    folder = tmp_path / "interrupted"
    folder.mkdir()
    artifacts = folder / "artifacts"

    def again() -> PipelineRun:
        return PipelineRun(folder, None, recipe=RESUMED_RECIPE, artifacts=artifacts)

    run = again()
    try:
        _both_seeds_past(run, artifacts, {})
        run.its_processes()
        run.stop(signal.SIGINT, kept=re.escape(GENERIC_STOP.format(artifacts)))
    finally:
        run.end()

    run = again()
    try:
        _both_seeds_past(run, artifacts, _newest_checkpoints(artifacts))
        child, seed = _child_training(run)
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

    run = again()
    try:
        assert run.process.wait(timeout=600) == 0, run.output[-3000:]
    finally:
        run.end()
    assert "resuming at step " in run.output
    assert _report(artifacts) == _report(reference.artifacts)
    assert _final_adapters(artifacts) == _final_adapters(reference.artifacts)
