"""The proof: stop a training process after a checkpoint (SIGTERM, then SIGKILL in the run that
resumed), start it again, and it resumes there, runs exactly the remaining steps, and ends with the
same adapter as a run never interrupted."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from flows.pipeline import train_flow
from flows.storage import in_store
from tasks.core.store import ArtifactStore

from .conftest import REPO_ROOT, SHIPPED_DATA, all_complete_steps

pytestmark = pytest.mark.slow

MAX_STEPS, SAVE_STEPS = 8, 2
RECIPE = {
    "name": "resume_test",
    "seeds": [7],
    # 8 train prompts, the held-out ones set apart: 4 steps an epoch, so that the resumed runs
    # go on in the second epoch, whose prompt order a resume once got wrong.
    "data": {
        "train_size": 12,
        "eval_per_task": {"extraction": 2, "sql_qa": 2, "insights": 2, "push": 2},
    },
    "model": {
        "tiny": {
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "intermediate_size": 64,
            "tokenizer_vocab_size": 600,
        }
    },
    "training": {
        "learning_rate": 1e-3,
        "num_generations": 4,
        "prompts_per_step": 2,
        "max_completion_length": 16,
        "max_steps": MAX_STEPS,
        "save_steps": SAVE_STEPS,
        "keep_checkpoints": 5,
        "heldout_prompts": 4,
        "num_generations_eval": 2,
        "eval_steps": 3,
        # every piece of state a checkpoint must carry is switched on
        "task_weighting": {"enabled": True, "window": 1},
        "dynamic_sampling": {"enabled": True, "max_refills": 1},
    },
}
STEP_LINE = re.compile(rf"step (\d+)/{MAX_STEPS} ")


def _start(tmp: Path, artifacts: Path) -> subprocess.Popen:
    """`tucano train` on the tests' Prefect server: a temporary server of its own would cost each
    run seconds (test_termination shows those go with the run)."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "flows.cli", "train", "--seed", "7"]
    command += ["--recipe", str(tmp / "recipe.yaml"), "--artifacts", str(artifacts)]
    return subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def _finish(process: subprocess.Popen) -> str:
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output[-3000:]
    return output


def _wait_for_checkpoint(process: subprocess.Popen, store: ArtifactStore, after: int = 0) -> None:
    deadline = time.monotonic() + 300
    while not [step for step in all_complete_steps(store) if step > after]:
        assert process.poll() is None, process.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.05)


def _adapter_bytes(store: ArtifactStore) -> bytes:
    (run,) = store.listdir("runs")
    return store.read_bytes(f"runs/{run}/final/adapter_model.safetensors")


@pytest.mark.usefixtures("prefect_api")
def test_a_stopped_run_resumes_twice_and_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(RECIPE))
    # The uninterrupted run is the command's flow, run in this process: what a process of its own
    # would add is its imports, seconds of CPU that the interrupted runs spend three times anyway.
    reference = ArtifactStore(tmp_path / "reference")
    recipe = str(tmp_path / "recipe.yaml")
    in_store(train_flow, reference)(recipe, reference.root, str(SHIPPED_DATA), seed=7)

    # SIGTERM, a spot VM's notice: the step in progress ends, a checkpoint is saved, exit 143.
    interrupted = ArtifactStore(tmp_path / "interrupted")
    process = _start(tmp_path, tmp_path / "interrupted")
    _wait_for_checkpoint(process, interrupted)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 143, output[-3000:]
    terminated_at = int(STEP_LINE.findall(output)[-1])
    assert all_complete_steps(interrupted)[-1] == terminated_at < MAX_STEPS

    # The resumed run, killed without a word (SIGKILL: OOM, a VM gone) after its next checkpoint.
    process = _start(tmp_path, tmp_path / "interrupted")
    _wait_for_checkpoint(process, interrupted, after=terminated_at)
    process.send_signal(signal.SIGKILL)
    output, _ = process.communicate()
    assert f"resuming at step {terminated_at}" in output
    killed_at = all_complete_steps(interrupted)[-1]
    assert terminated_at < killed_at < MAX_STEPS, "the run finished before it could be killed"
    assert not interrupted.exists(f"runs/{interrupted.listdir('runs')[0]}/final")

    output = _finish(_start(tmp_path, tmp_path / "interrupted"))
    assert f"resuming at step {killed_at}" in output
    steps_run = [int(step) for step in STEP_LINE.findall(output)]
    assert steps_run == list(range(killed_at + 1, MAX_STEPS + 1))  # exactly the remaining steps

    assert _adapter_bytes(interrupted) == _adapter_bytes(reference)
    _same_final_metrics(interrupted, reference)


def _same_final_metrics(resumed_store: ArtifactStore, reference: ArtifactStore) -> None:
    (run,) = resumed_store.listdir("runs")
    resumed = resumed_store.read_json(f"runs/{run}/log_history.json")
    uninterrupted = reference.read_json(f"runs/{run}/log_history.json")
    for metric, keys in (
        ("reward", ("reward", "loss", "entropy", "grad_norm")),
        ("eval_reward", ("eval_reward", "eval_entropy", "eval_loss")),
    ):
        last = [entry for entry in resumed if metric in entry][-1]
        expected = [entry for entry in uninterrupted if metric in entry][-1]
        assert last["step"] == expected["step"] == MAX_STEPS
        for key in keys:
            assert last[key] == expected[key], key
    assert resumed_store.read_json(f"runs/{run}/summary.json") == reference.read_json(
        f"runs/{run}/summary.json"
    )
