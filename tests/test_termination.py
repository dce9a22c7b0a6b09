"""A `tucano` run ends whole, whatever ends it. Killed with SIGKILL, none of its processes
outlives it (its temporary Prefect server included). Sent SIGTERM (`timeout`, systemd, a
container's stop, a spot VM's shutdown) or SIGINT (Ctrl-C) to its process group in any stage, it
stops at that stage's next safe point, keeps what a restart goes on from, says where in one line,
and exits within seconds with 128 + the signal, leaving no process behind. Prep, the audit, SFT
and GRPO here; evaluation, export and analyze, which need a trained store, in test_production."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import yaml

from tasks.core.store import COMPLETE_MARKER, ArtifactStore

from .conftest import REPO_ROOT, complete_checkpoints
from .servers import BIN, descendants, process_table, still_alive
from .test_resume import RECIPE as RESUME_RECIPE

pytestmark = pytest.mark.slow

# A spot VM's notice is about 30 seconds.
EXIT_BOUND_S = 30
# The resume test's data and model; far more steps than the tests wait for, so that the signal
# always lands in training.
RECIPE = {
    **RESUME_RECIPE,
    "name": "termination_test",
    "training": {
        "num_generations": 4,
        "prompts_per_step": 2,
        "max_completion_length": 16,
        "max_steps": 10_000,
        "save_steps": 10_000,
        "eval_steps": 10_000,
        "heldout_prompts": 4,
    },
}
TRAINING_STEP = re.compile(r"step \d+/10000 ")
# The same, with SFT first: a line every 20 of its steps (a fifth of a second each), which the
# signal follows long before the last.
SFT_RECIPE = {
    **RECIPE,
    "sft": {"enabled": True, "full_finetune": True, "max_steps": 400, "save_steps": 400},
}
SFT_STEP = re.compile(r"step \d+/400 loss ")
EXIT_STATUS = {signal.SIGTERM: 143, signal.SIGINT: 130}
GENERIC_STOP = "every step that finished is kept in {}, and the same command goes on from there"


def tucano_command(args: Sequence[str], pause: str | None = None) -> list[str]:
    """`tucano ARGS`, or the same command pausing in the first call of `pause` (tests/paused)."""
    if pause is None:
        return [str(BIN / "tucano"), *args]
    return [sys.executable, "-m", "tests.paused", pause, "--", "tucano", *args]


class PipelineRun:
    """A `tucano` command started as a job runner starts one (a process group of its own), its
    output read as it comes, and every process it started remembered. `pipeline` by default."""

    def __init__(
        self,
        tmp: Path,
        prefect_home: Path | None,
        args: Sequence[str] = ("pipeline",),
        *,
        recipe: dict | None = None,
        artifacts: Path | None = None,
        pause: str | None = None,
    ) -> None:
        self.recipe = tmp / "recipe.yaml"
        self.recipe.write_text(yaml.safe_dump(recipe or RECIPE))
        self.artifacts = artifacts or tmp / "artifacts"
        path = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(REPO_ROOT)]))
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
        if prefect_home is None:  # the tests' Prefect server
            from prefect.settings import PREFECT_API_URL

            env["PREFECT_API_URL"] = PREFECT_API_URL.value()
        else:  # a temporary server of the run's own
            env["PREFECT_HOME"] = str(prefect_home)
            env.pop("PREFECT_API_URL", None)
        store = ["--config", str(self.recipe), "--artifacts", str(self.artifacts)]
        self.process = subprocess.Popen(
            tucano_command([*args, *store], pause),
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.seen: dict[int, int] = {}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: re.Pattern[str] | str, timeout: float = 300) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if match := re.search(pattern, self.output):
                return match
            assert self.process.poll() is None, f"the run ended first:\n{self.output[-3000:]}"
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} after {timeout} s:\n{self.output[-3000:]}")

    def its_processes(self) -> dict[int, int]:
        """Every process the run has started and still has: pid -> start time."""
        found = descendants(self.process.pid)
        assert found, "the run has no process of its own (its temporary Prefect server)"
        self.seen.update(found)
        return found

    def stop(self, signum: int, *, kept: str) -> str:
        """`signum` to the run's process group: the run must exit within the bound with
        128 + signum, saying `kept` (a regular expression) of what it kept, and leave no
        process. The match."""
        _terminate(self, lambda: os.killpg(self.process.pid, signum))
        output = self.output
        assert self.process.returncode == EXIT_STATUS[signum], output[-3000:]
        name = signal.Signals(signum).name
        said = re.search(rf"tucano \w+: stopped by {name}; {kept}", output)
        assert said, output[-3000:]
        assert self.left_after(seconds=5) == []
        return said

    def left_after(self, seconds: float) -> list[str]:
        """The command lines of the run's processes (those it started, and its process group)
        still alive after at most `seconds`."""
        deadline = time.monotonic() + seconds
        while (left := self._alive()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return [_command_line(pid) for pid in left]

    def _alive(self) -> list[int]:
        group = [pid for pid, p in process_table().items() if p.group == self.process.pid]
        return sorted({*still_alive(self.seen), *group})

    def end(self) -> None:
        """Whatever a failed test left, gone."""
        for pid in self._alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.kill()
        self.process.wait()


def _command_line(pid: int) -> str:
    try:
        return f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return f"{pid}: (gone meanwhile)"


@pytest.fixture(scope="module")
def prefect_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One for the module's runs: its database is set up once (seconds a run)."""
    return tmp_path_factory.mktemp("prefect-home")


@pytest.fixture
def pipeline_run(tmp_path: Path, prefect_home: Path):
    run = PipelineRun(tmp_path, prefect_home)
    yield run
    run.end()


def _terminate(run: PipelineRun, send: Callable[[], None]) -> None:
    """`send` a SIGTERM; the run must exit within the bound."""
    send()
    try:
        run.process.wait(timeout=EXIT_BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {EXIT_BOUND_S} s after SIGTERM:\n{run.output[-3000:]}")


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
        _terminate(pipeline_run, lambda: os.killpg(pipeline_run.process.pid, signal.SIGTERM))
    else:  # systemd signals every process of a unit: this one may come first
        _terminate(pipeline_run, lambda: os.kill(server, signal.SIGTERM))

    output = pipeline_run.output
    assert pipeline_run.process.returncode == 143, output[-3000:]
    said = re.search(r"tucano pipeline: stopped by SIGTERM; seed 7's checkpoint after step (\d+) "
                     r"is in (\S+), and the same command goes on from there", output)  # fmt: skip
    assert said, output[-3000:]
    checkpoint = Path(said[2]) / f"checkpoint-{said[1]}"
    assert (checkpoint / COMPLETE_MARKER).is_file(), sorted(Path(said[2]).iterdir())
    assert pipeline_run.left_after(seconds=5) == []


def test_sigterm_during_sft_saves_its_checkpoint_and_never_reaches_grpo(
    tmp_path: Path, prefect_home: Path
) -> None:
    run = PipelineRun(tmp_path, prefect_home, recipe=SFT_RECIPE)
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
def test_a_signal_mid_stage_stops_it_with_nothing_half_written(
    tmp_path: Path, prefect_home: Path, command: str, pause: str, signum: int
) -> None:
    run = PipelineRun(tmp_path, prefect_home, [command], pause=pause)
    try:
        run.wait_for(f"PAUSED IN {pause}")
        run.its_processes()
        run.stop(signum, kept=re.escape(GENERIC_STOP.format(run.artifacts)))
    finally:
        run.end()
    prepared = run.artifacts / "prepared"
    folders = list(prepared.iterdir()) if prepared.exists() else []
    # Nothing of it, not even a folder without its marker; the audit prepares no data and
    # leaves no record.
    assert folders == []
    assert "reward audit passed" not in run.output


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
        command = _command_line(pid)
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
        _terminate(run, lambda: os.kill(child, signal.SIGKILL))
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
