"""Every artifact on s3:// through s3fs, against a real S3-compatible HTTP server on loopback
(moto's server mode). Credentials and the endpoint come only from the environment."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
import yaml

from configs.recipe import LoraConfig, TrainingConfig
from flows.cli import main
from tasks.core.store import ArtifactStore
from tasks.training.train import train_seed

from .conftest import SHIPPED_DATA, small_training_inputs
from .servers import DyingProxy, moto_s3
from .test_pipeline import SMALL_RECIPE

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_api")]

BUCKET = "tucano"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """The moto server, and the environment s3fs reads: fake keys, its endpoint."""
    with moto_s3(tmp_path_factory.mktemp("moto"), BUCKET) as env:
        yield env["AWS_ENDPOINT_URL"]


def _bucket():
    import s3fs

    return s3fs.S3FileSystem()


def test_a_pipeline_run_keeps_every_artifact_on_s3(s3, tmp_path, monkeypatch, capsys) -> None:
    _bucket().put(f"{SHIPPED_DATA}/", f"{BUCKET}/olist/", recursive=True)
    recipe = json.loads(json.dumps(SMALL_RECIPE))
    recipe["seeds"] = [1]
    recipe["training"].update(max_steps=2, save_steps=2)
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    monkeypatch.chdir(tmp_path)  # anything written locally by mistake would land here
    command = ["pipeline", "--recipe", str(tmp_path / "recipe.yaml")]
    command += ["--artifacts", f"s3://{BUCKET}/run", "--data", f"s3://{BUCKET}/olist"]
    assert main(command) == 0
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert last_line.startswith(f"report: s3://{BUCKET}/run/reports/")
    bucket = _bucket()
    for pattern in (
        "prepared/*/train.jsonl",
        "prepared/*/olist.sqlite",
        "models/tiny-*/model.safetensors",
        "runs/*/checkpoints/checkpoint-2/_COMPLETE",
        "runs/*/best/adapter_model.safetensors",
        "eval/base-*.jsonl",
        "reports/*/report.json",
        "reports/*/start_vs_tuned.png",
        ".prefect-results/*",
    ):
        assert bucket.glob(f"{BUCKET}/run/{pattern}"), pattern
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recipe.yaml"]
    # A second run finds its cache (Prefect's results) on S3 too: nothing is recomputed.
    assert main(command) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == last_line


def test_a_server_dying_mid_upload_leaves_that_checkpoint_invisible_and_resume_uses_the_last(
    s3, caplog
) -> None:
    """The S3 endpoint dies halfway through checkpoint 4's upload: training fails; when the
    server is back, a new run skips the unmarked checkpoint 4 and resumes from checkpoint 2."""
    upstream = int(s3.rsplit(":", 1)[1])
    proxy = DyingProxy(upstream, "checkpoint-4/", die_on_upload=2)
    _use_endpoint(f"http://127.0.0.1:{proxy.port}")
    try:
        store = ArtifactStore(f"s3://{BUCKET}/dying")
        data, base = small_training_inputs(store)
        training = TrainingConfig(
            num_generations=2, prompts_per_step=1, max_completion_length=8, max_steps=6,
            save_steps=2, heldout_prompts=0, learning_rate=5e-4,
        )  # fmt: skip
        lora = LoraConfig(r=4, alpha=8)
        with pytest.raises(Exception):  # noqa: B017 - whatever s3fs raises for a dead endpoint
            train_seed(training, lora, data, base, 3, store)
        assert proxy.died.is_set()
        # What the bucket holds, seen past the dead endpoint.
        _use_endpoint(s3)
        behind = ArtifactStore(f"s3://{BUCKET}/dying")
        checkpoints = f"runs/{_run_folder(behind)}/checkpoints"
        assert behind.listdir(checkpoints) == ["checkpoint-2", "checkpoint-4"]
        assert behind.listdir(f"{checkpoints}/checkpoint-4")  # some files made it...
        assert not behind.exists(f"{checkpoints}/checkpoint-4/_COMPLETE")  # ...not the marker
        assert behind.exists(f"{checkpoints}/checkpoint-2/_COMPLETE")

        proxy.revive()
        _use_endpoint(f"http://127.0.0.1:{proxy.port}")
        with caplog.at_level(logging.INFO, logger="tucano"):
            adapter = train_seed(training, lora, data, base, 3, store)
        assert "checkpoint-4" in caplog.text and "resuming at step 2" in caplog.text
        assert adapter.global_step == 6
    finally:
        proxy.die()
        _use_endpoint(s3)


def _use_endpoint(endpoint: str) -> None:
    import s3fs

    os.environ["AWS_ENDPOINT_URL"] = endpoint
    s3fs.S3FileSystem.clear_instance_cache()  # instances remember the endpoint they were made with


def _run_folder(store: ArtifactStore) -> str:
    (run,) = store.listdir("runs")
    return Path(run).name


def test_two_processes_fetching_one_artifact_at_once_share_one_copy(s3, tmp_path) -> None:
    """Two seeds on one machine read the base model from the store at the same moment: the one
    that finishes second finds the other's copy in place of its own (in a shared folder, renaming
    onto it fails), and uses it."""
    store = ArtifactStore(f"s3://{BUCKET}/shared-fetch")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.bin").write_bytes(b"weights")
    store.put_dir(tmp_path / "model", "base")
    cache = tmp_path / "cache"
    fetch = store.fs.get
    others = []

    def fetched_beside_another(source, staging, **kwargs):
        fetch(source, staging, **kwargs)
        if not others:
            others.append(None)
            others[0] = store.local_dir("base", cache)  # the other process, done first

    store.fs.get = fetched_beside_another
    try:
        folder = store.local_dir("base", cache)
    finally:
        store.fs.get = fetch
    assert folder == others[0]
    assert (folder / "weights.bin").read_bytes() == b"weights"
    assert [p.name for p in (cache / "tucano-store-cache").iterdir()] == [folder.name]
