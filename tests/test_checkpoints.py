"""Checkpoints in the store: complete or invisible, newest verified restored, old pruned."""

import logging
from pathlib import Path

import pytest

from tasks.core.store import COMPLETE_MARKER, ArtifactStore
from tasks.training.checkpoints import RunCheckpoints


def _checkpoint(tmp_path: Path, step: int) -> Path:
    folder = tmp_path / "local" / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(bytes([step]) * 1000)
    (folder / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
    return folder


@pytest.fixture
def run(tmp_path: Path) -> RunCheckpoints:
    checkpoints = RunCheckpoints(ArtifactStore(tmp_path / "store"), "runs/k/checkpoints", keep=3)
    for step in (2, 4, 6):
        checkpoints.upload(_checkpoint(tmp_path, step), step)
    return checkpoints


def test_the_newest_complete_checkpoint_is_restored(run: RunCheckpoints, tmp_path: Path) -> None:
    restored = run.restore_latest(tmp_path / "out")
    assert restored is not None and restored.name == "checkpoint-6"
    assert (restored / "trainer_state.json").read_text() == '{"global_step": 6}'
    assert not (restored / COMPLETE_MARKER).exists()


def test_a_checkpoint_without_marker_is_skipped_with_a_warning(run, tmp_path: Path, caplog) -> None:
    (tmp_path / "store" / "runs/k/checkpoints/checkpoint-6" / COMPLETE_MARKER).unlink()
    with caplog.at_level(logging.WARNING, logger="tucano.checkpoints"):
        restored = run.restore_latest(tmp_path / "out")
    assert restored is not None and restored.name == "checkpoint-4"
    assert "checkpoint-6: no completeness marker" in caplog.text


def test_a_truncated_checkpoint_is_skipped(run: RunCheckpoints, tmp_path: Path, caplog) -> None:
    weights = tmp_path / "store" / "runs/k/checkpoints/checkpoint-6/adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with caplog.at_level(logging.WARNING, logger="tucano.checkpoints"):
        restored = run.restore_latest(tmp_path / "out")
    assert restored is not None and restored.name == "checkpoint-4"
    assert "do not match their marker" in caplog.text
    assert not (tmp_path / "out" / "checkpoint-6").exists()


def test_nothing_to_restore(tmp_path: Path) -> None:
    empty = RunCheckpoints(ArtifactStore(tmp_path), "runs/none/checkpoints", keep=2)
    assert empty.restore_latest(tmp_path / "out") is None


def test_old_checkpoints_are_pruned_but_never_the_protected_one(run, tmp_path: Path) -> None:
    run.keep = 2
    run.protected = {2}
    run.upload(_checkpoint(tmp_path, 8), 8)
    assert run.steps() == [2, 6, 8]
