"""Deployments on a real `prefect server start` (SQLite, loopback) with real process workers:
registered by `tucano deploy`, triggered through the API, killed mid-training and resumed. The
`remote` pool's workers run in folders with no checkout, from a Python without the project: each
run clones the code from a git remote and keeps its work on a store shared through moto's S3."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import pytest
import yaml
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterKey,
    FlowRunFilter,
    FlowRunFilterTags,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.client.schemas.sorting import ArtifactSort, LogSort
from prefect.deployments import run_deployment
from prefect.settings import PREFECT_API_URL, temporary_settings
from prefect.states import Crashed

from flows.deploy import (
    GPU_DEPLOYMENTS,
    LOCAL_DEPLOYMENTS,
    REMOTE_DEPLOYMENTS,
    ZOMBIE_AUTOMATION,
    deploy,
)
from flows.fanout import RESUME_TAG, handoff_path, successor
from tasks.core.store import ArtifactStore

from .conftest import REPO_ROOT, SHIPPED_DATA, all_complete_steps
from .servers import (
    flow_run_pid,
    git_remote,
    moto_s3,
    python_without_the_project,
    start_prefect_server,
    wait_for,
)
from .test_pipeline import SMALL_RECIPE, subflow_ids

pytestmark = pytest.mark.slow

SEEDED = "tucano-seeded-training/seeded-training-local"
SEEDED_REMOTE = "tucano-seeded-training/seeded-training-remote"
BUCKET = "shared-store"
# Two missed heartbeats (every 30 s, Prefect's minimum): quick enough for a test, and not so
# tight that a busy CPU delaying one heartbeat marks a live run as lost.
ZOMBIE_AFTER_S = 60
SCREENSHOTS = Path(__file__).resolve().parents[1] / "test-output" / "ui"


@pytest.fixture(scope="module")
def server(tmp_path_factory, prefect_api):
    """The server (on a copy of the tests' server's database as it started), a `local` worker in
    the server's folder and a `remote` one in an empty folder (another machine: no checkout, the
    project not installed), both with the S3 store's credentials in their environment."""
    root = tmp_path_factory.mktemp("prefect-server")
    with moto_s3(root, BUCKET):
        running = start_prefect_server(root, prefect_api)
        try:
            with temporary_settings(updates={PREFECT_API_URL: running.url}):
                deploy(zombie_after_s=ZOMBIE_AFTER_S, git_repository=git_remote(REPO_ROOT, root))
                running.start_worker("local")
                running.remote_python = python_without_the_project(root)
                _start_remote_worker(running, "machine-a", root)
                yield running
        finally:
            running.stop()


def _start_remote_worker(server, name: str, root: Path):
    folder = root / name
    folder.mkdir()
    # what makes it another machine: outside a clone, its Python has no tucano code at all
    found = subprocess.run([server.remote_python, "-c", "import flows"], cwd=folder)
    assert found.returncode != 0, "the remote worker's Python imports the project itself"
    return server.start_worker("remote", name=name, python=server.remote_python, folder=folder)


def _recipe(path: Path, **training) -> str:
    recipe = json.loads(json.dumps(SMALL_RECIPE))
    recipe["seeds"] = [3]
    # What is tested is how runs are started, lost and resumed: GRPO from the tiny base model.
    recipe["sft"]["enabled"] = False
    recipe["training"].update(training)
    path.write_text(yaml.safe_dump(recipe))
    return str(path)


def _run_parameters(recipe: str, artifacts: Path, seed: int, **extra) -> dict:
    return {
        "run": {
            "recipe": recipe,
            "artifacts": str(artifacts),
            "data": str(SHIPPED_DATA),
            "seed": seed,
            **extra,
        }
    }


def _read(flow_run_id: UUID):
    with get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id)


def _final(flow_run_id: UUID, timeout: float = 300):
    return wait_for(
        lambda: (run := _read(flow_run_id)).state.is_final() and run,
        timeout,
        f"flow run {flow_run_id} to finish",
    )


def _logs(flow_run_ids: list[UUID]) -> str:
    with get_client(sync_client=True) as client:
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=flow_run_ids)),
            sort=LogSort.TIMESTAMP_ASC,
            limit=200,
            offset=0,
        )
    return "\n".join(log.message for log in logs)


def _resume_outcomes() -> list[dict]:
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["tucano-resume"])),
            sort=ArtifactSort.ID_DESC,
            limit=50,
            offset=0,
        )
    return [row for artifact in artifacts for row in json.loads(artifact.data)]


def test_deploy_registers_everything_idempotently(server) -> None:
    with get_client(sync_client=True) as client:
        before = {d.name: d.id for d in client.read_deployments()}
        assert set(before) == {*LOCAL_DEPLOYMENTS, *REMOTE_DEPLOYMENTS}
        repository = client.read_deployment_by_name(SEEDED_REMOTE).pull_steps[0]
        assert repository["prefect.deployments.steps.git_clone"]["repository"].startswith("file:")
        assert deploy(
            "gcr.io/acme/tucano:1",
            "southamerica-east1",
            zombie_after_s=ZOMBIE_AFTER_S,
            git_repository=repository["prefect.deployments.steps.git_clone"]["repository"],
        )
        after = {d.name: d.id for d in client.read_deployments()}
        assert set(after) == {*LOCAL_DEPLOYMENTS, *REMOTE_DEPLOYMENTS, *GPU_DEPLOYMENTS}
        assert {name: after[name] for name in before} == before  # updated in place
        gpu_pool = client.read_work_pool("l4-gpu")
        assert gpu_pool.type == "vertex-ai"
        defaults = {
            name: spec.get("default")
            for name, spec in gpu_pool.base_job_template["variables"]["properties"].items()
        }
        assert defaults["machine_type"] == "g2-standard-8"
        assert (defaults["accelerator_type"], defaults["accelerator_count"]) == ("NVIDIA_L4", 1)
        assert defaults["scheduling"] == {"strategy": "SPOT"}
        training = client.read_deployment_by_name("tucano-seeded-training/seeded-training")
        assert training.job_variables["image"] == "gcr.io/acme/tucano:1"
        assert (
            training.parameter_openapi_schema["definitions"]["TrainingRun"]["properties"]["seed"][
                "maximum"
            ]
            == 2**32 - 1
        )
        retraining = client.read_deployment_by_name(
            "tucano-scheduled-retraining/scheduled-retraining-local"
        )
        cron = retraining.schedules[0].schedule
        assert (cron.cron, cron.timezone) == ("0 3 * * 1", "America/Sao_Paulo")
        automations = client.read_automations_by_name(ZOMBIE_AUTOMATION)
        assert len(automations) == 1
        assert automations[0].trigger.posture == "Proactive"


def test_the_attempt_limit_holds(server, tmp_path) -> None:
    """A crash on the last allowed attempt starts nothing. How a crash gets reported (a killed
    process, a lost machine) is the two tests around this one: here the run, scheduled an hour
    ahead so that no worker takes it, is set Crashed through the API, which is what the resume
    automation reacts to."""
    recipe = _recipe(tmp_path / "recipe.yaml", max_steps=16, save_steps=2)
    parameters = _run_parameters(recipe, tmp_path / "store", 6, max_attempts=1)
    later = datetime.now(UTC) + timedelta(hours=1)
    run = run_deployment(SEEDED, parameters=parameters, timeout=0, scheduled_time=later)
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(run.id, Crashed(message="its machine is gone"), force=True)
    assert _read(run.id).state.is_crashed()
    wait_for(
        lambda: any(
            row["crashed_run"] == str(run.id) and row["outcome"] == "not resumed: 1 of 1 runs"
            for row in _resume_outcomes()
        ),
        120,
        "the resume decision",
    )
    assert successor(run.id) is None
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(deployment_filter=None, limit=200)
    assert [r.id for r in runs if r.parameters.get("run", {}).get("seed") == 6] == [run.id]


def _submitted_by(server, worker: str, flow_run_id: UUID) -> bool:
    log = (server.logs / f"{worker}.log").read_text()
    return f"Worker '{worker}' submitting flow run '{flow_run_id}'" in log


def test_the_pipeline_fans_its_seeds_out_to_workers_with_no_checkout(server, tmp_path) -> None:
    """The pipeline (local pool) starts each seed on the remote pool; that worker clones the code,
    trains onto the S3 store both share, and the pipeline's report reads the seeds' runs."""
    recipe = _recipe(tmp_path / "recipe.yaml", max_steps=2, save_steps=2)
    text = yaml.safe_load(Path(recipe).read_text())
    Path(recipe).write_text(yaml.safe_dump({**text, "seeds": [21, 22]}))
    store = f"s3://{BUCKET}/fanout"
    parameters = {
        "run": {"recipe": recipe, "artifacts": store, "training_deployment": SEEDED_REMOTE}
    }
    run = run_deployment(
        "tucano-deployed-pipeline/pipeline-local", parameters=parameters, timeout=0
    )
    done = _final(run.id, timeout=500)
    assert done.state.is_completed(), done.state.message
    with get_client(sync_client=True) as client:
        seeds = {
            seed: client.read_flow_runs(
                flow_run_filter=FlowRunFilter(tags=FlowRunFilterTags(all_=[f"seed:{seed}"])),
                limit=5,
            )
            for seed in (21, 22)
        }
    for seed, runs in seeds.items():
        assert [(r.name, r.state.name) for r in runs] == [(f"seed-{seed}-attempt-1", "Completed")]
        assert runs[0].work_pool_name == "remote"
        # the data path travelled as the project's own, read in the worker's clone
        assert runs[0].parameters["run"]["data"] == "data/olist"
        assert _submitted_by(server, "machine-a", runs[0].id)
        adapter = ArtifactStore(store).read_json(handoff_path(runs[0].id))
        assert (adapter["seed"], adapter["global_step"]) == (seed, 2)
    reports = ArtifactStore(store).listdir("reports")
    assert len(reports) == 1
    assert ArtifactStore(store).read_json(f"reports/{reports[0]}/report.json")["seeds"] == [21, 22]


CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",  # the tests run as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # no calls home: this machine's network is closed and Chromium would wait on them
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1800",
    # the UI is a single-page app: let its scripts fetch the deployment and draw the form
    "--virtual-time-budget=20000",
]


def test_the_run_form_in_the_ui_has_the_seed_field(server, tmp_path) -> None:
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is needed (make test installs it)"
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment_by_name(SEEDED)
    page = f"{server.ui}/deployments/deployment/{deployment.id}/run"
    browse = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*browse, "--dump-dom", page], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "Seed" in dom
    assert "Random seed of this run: data order, LoRA initialisation, sampling." in dom
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    screenshot = SCREENSHOTS / "seeded-training-run-form.png"
    subprocess.run(
        [*browse, f"--screenshot={screenshot}", page], capture_output=True, timeout=120, check=True
    )
    assert screenshot.read_bytes().startswith(b"\x89PNG")


def test_a_run_whose_machine_vanished_is_resumed_by_another_machine(server, tmp_path) -> None:
    """Worker and flow-run process die together, as with a VM that disappears: nothing is left
    to report the crash; the heartbeat automation marks the run Crashed, the resume automation
    starts its second attempt, and a worker on another machine (its own empty folder) runs it
    from the last complete checkpoint in the S3 store. Last in the module: machine A stays
    gone."""
    recipe = _recipe(tmp_path / "recipe.yaml", max_steps=20, save_steps=2)
    store = ArtifactStore(f"s3://{BUCKET}/vanished")
    parameters = {"run": {"recipe": recipe, "artifacts": store.root_uri, "seed": 9}}
    run = run_deployment(SEEDED_REMOTE, parameters=parameters, timeout=0)
    wait_for(lambda: all_complete_steps(store), 300, "a checkpoint", 1)
    flow_process = flow_run_pid(run.id)
    worker = server.processes["machine-a"]
    os.killpg(worker.pid, signal.SIGKILL)  # the machine goes: its worker and its flow run
    with contextlib.suppress(ProcessLookupError):
        os.kill(flow_process, signal.SIGKILL)
    worker.wait()
    kept = all_complete_steps(store)[-1]
    assert _read(run.id).state.is_running()  # nobody left to say otherwise
    crashed = _final(run.id, timeout=ZOMBIE_AFTER_S + 120)
    assert crashed.state.is_crashed()
    assert f"no heartbeat for {ZOMBIE_AFTER_S} s" in crashed.state.message
    _start_remote_worker(server, "machine-b", tmp_path)
    resumed = wait_for(lambda: successor(run.id), 120, "the resumed run")
    assert f"{RESUME_TAG}{run.id}" in resumed.tags
    done = _final(resumed.id)
    assert done.state.is_completed(), done.state.message
    assert done.name == "seed-9-attempt-2"
    assert ArtifactStore(store.root_uri).read_json(handoff_path(resumed.id))["global_step"] == 20
    logs = wait_for(
        lambda: (
            "resuming at step " in (text := _logs([resumed.id, *subflow_ids(resumed.id)])) and text
        ),
        30,
        "the resumed run's log of where it resumed",
    )
    assert int(logs.split("resuming at step ")[1].split()[0].rstrip(",")) >= kept
    assert _submitted_by(server, "machine-b", resumed.id)
    outcomes = _resume_outcomes()
    assert any(
        row["outcome"] == f"resumed as flow run {resumed.id}, attempt 2" for row in outcomes
    ), outcomes
