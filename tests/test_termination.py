"""A `tucano` run ends whole, whatever ends it. Killed with SIGKILL, none of its processes
outlives it (its temporary Prefect server included). Sent SIGTERM (`timeout`, systemd, a
container's stop, a spot VM's shutdown) or SIGINT (Ctrl-C) to its process group in any stage, it
stops at that stage's next safe point, keeps what a restart goes on from, says where in one line,
and exits within seconds with 128 + the signal, leaving no process behind. Prep, the audit, SFT
and GRPO here; evaluation, export and analyze, which need a trained store, in test_production."""

from __future__ import annotations

import os
import re
import signal
import socket
from pathlib import Path

import pytest

from tasks.core.store import COMPLETE_MARKER

from .pipeline_runs import GENERIC_STOP, RECIPE, PipelineRun, terminate

pytestmark = pytest.mark.slow

TRAINING_STEP = re.compile(r"step \d+/10000 ")
# The termination recipe with SFT first: a line every 20 of its steps (a fifth of a second
# each), which the signal follows long before the last.
SFT_RECIPE = {
    **RECIPE,
    "sft": {"enabled": True, "full_finetune": True, "max_steps": 400, "save_steps": 400},
}
SFT_STEP = re.compile(r"step \d+/400 loss ")


@pytest.fixture
def pipeline_run(tmp_path: Path, prefect_home: Path):
    run = PipelineRun(tmp_path, prefect_home)
    yield run
    run.end()


def test_sigkill_in_training_leaves_no_process_of_the_run(pipeline_run: PipelineRun) -> None:
    port = int(pipeline_run.wait_for(r"temporary server on http://127\.0\.0\.1:(\d+)").group(1))
    pipeline_run.wait_for(TRAINING_STEP)
    pipeline_run.its_processes()

    pipeline_run.process.kill()
    pipeline_run.process.wait()

    assert pipeline_run.left_after(seconds=10) == []
    with pytest.raises(ConnectionRefusedError):  # its port is free again
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


@pytest.mark.parametrize("receiver", ["its process group", "its temporary server alone"])
def test_sigterm_in_training_saves_a_checkpoint_and_exits_within_seconds(
    pipeline_run: PipelineRun, receiver: str
) -> None:
    pipeline_run.wait_for(TRAINING_STEP)
    (server,) = pipeline_run.its_processes()
    if receiver == "its process group":  # `timeout`, a container's stop, a spot VM's shutdown
        terminate(pipeline_run, lambda: os.killpg(pipeline_run.process.pid, signal.SIGTERM))
    else:  # systemd signals every process of a unit: this one may come first
        terminate(pipeline_run, lambda: os.kill(server, signal.SIGTERM))

    output = pipeline_run.output
    assert pipeline_run.process.returncode == 143, output[-3000:]
    said = re.search(r"tucano pipeline: stopped by SIGTERM; seed 7's checkpoint after step (\d+) "
                     r"is in (\S+), and the same command goes on from there", output)  # fmt: skip
    assert said, output[-3000:]
    checkpoint = Path(said[2]) / f"checkpoint-{said[1]}"
    assert (checkpoint / COMPLETE_MARKER).is_file(), sorted(Path(said[2]).iterdir())
    assert pipeline_run.left_after(seconds=5) == []


# The tests below stop a stage, not its server: they run on the tests' server, which spares
# each the start of one of its own (about 10 s of CPU).
@pytest.mark.usefixtures("prefect_api")
def test_sigterm_during_sft_saves_its_checkpoint_and_never_reaches_grpo(tmp_path: Path) -> None:
    run = PipelineRun(tmp_path, None, recipe=SFT_RECIPE)
    try:
        run.wait_for(SFT_STEP)
        run.its_processes()
        said = run.stop(signal.SIGTERM, kept=r"SFT's checkpoint after step (\d+) is in (\S+),")
    finally:
        run.end()
    assert (Path(said[2]) / f"checkpoint-{said[1]}" / COMPLETE_MARKER).is_file()
    assert "training seed" not in run.output  # GRPO never started


@pytest.mark.parametrize(
    ("command", "pause", "signum"),
    [
        # Between the SQLite copy and the prompt sets.
        ("data", "tasks.prep.build:build_prompt_sets", signal.SIGTERM),
        # The data prepared, the rewards being scored against the human scores: Ctrl-C.
        ("audit", "tasks.evaluation.audit:audit_rewards", signal.SIGINT),
    ],
)
@pytest.mark.usefixtures("prefect_api")
def test_a_signal_mid_stage_stops_it_with_nothing_half_written(
    tmp_path: Path, command: str, pause: str, signum: int
) -> None:
    # An empty cache: from a kept audit, the audit would score nothing to stop.
    cache = tmp_path / "cache"
    run = PipelineRun(tmp_path, None, [command], pause=pause, env={"XDG_CACHE_HOME": str(cache)})
    try:
        run.wait_for(f"PAUSED IN {pause}")
        run.its_processes()
        run.stop(signum, kept=re.escape(GENERIC_STOP.format(run.artifacts)))
    finally:
        run.end()
    prepared = run.artifacts / "prepared"
    folders = list(prepared.iterdir()) if prepared.exists() else []
    # Nothing of it, not even a folder without its marker; the audit prepares no data and
    # leaves no record, nor a kept audit.
    assert folders == []
    assert not (cache / "tucano" / "audits").exists()
    assert "reward audit passed" not in run.output
