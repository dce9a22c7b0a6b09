"""`tucano deploy`: work pools, deployments and the zombie automation on a Prefect server, all
idempotent (running it again updates in place).

The zombie automation is what makes a lost machine visible: flow runs send a heartbeat every
HEARTBEAT_SECONDS (PREFECT_FLOWS_HEARTBEAT_FREQUENCY in the pools' environment); when a
seeded-training run misses them for `zombie_after_s`, the server marks it Crashed, and the
resume-training deployment's trigger starts its next attempt. Without it, a run whose VM vanished
(with its worker) would stay Running forever: no hook can run on a machine that is gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from typing import NamedTuple

from flows.parameters import REPO_ROOT

DEPLOYMENTS_DIR = REPO_ROOT / "deployments"
PREFECT_FILE = DEPLOYMENTS_DIR / "prefect.yaml"


class Pool(NamedTuple):
    type: str
    template: str  # deployments/work-pools/<template>.json: its base job template


POOLS = {
    # Process workers: `local` runs the deploying machine's checkout, `remote` clones the code.
    "local": Pool("process", "process"),
    "remote": Pool("process", "process"),
    "l4-gpu": Pool("vertex-ai", "l4-gpu"),
}
LOCAL_DEPLOYMENTS = (
    "seeded-training-local",
    "pipeline-local",
    "scheduled-retraining-local",
    "resume-training-local",
    "review-analysis-local",
)
REMOTE_DEPLOYMENTS = ("seeded-training-remote", "resume-training-remote")
GPU_DEPLOYMENTS = (
    "seeded-training",
    "pipeline",
    "scheduled-retraining",
    "resume-training",
    "review-analysis",
)
TRAINING_FLOW = "tucano-seeded-training"
ZOMBIE_AUTOMATION = "tucano-crash-silent-training-runs"
FINAL_EVENTS = ("Completed", "Failed", "Cancelled", "Crashed")


class DeployError(RuntimeError):
    """Something `tucano deploy` needs is missing; the message says what."""


def pool_template(name: str) -> dict:
    return json.loads((DEPLOYMENTS_DIR / "work-pools" / f"{POOLS[name].template}.json").read_text())


def ensure_pool(name: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate, WorkPoolUpdate
    from prefect.exceptions import ObjectNotFound

    template = pool_template(name)
    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(name)
        except ObjectNotFound:
            client.create_work_pool(
                WorkPoolCreate(name=name, type=POOLS[name].type, base_job_template=template)
            )
        else:
            client.update_work_pool(name, WorkPoolUpdate(base_job_template=template))


def ensure_zombie_automation(zombie_after_s: int) -> None:
    from prefect.automations import Automation
    from prefect.client.schemas.objects import StateType
    from prefect.events.actions import ChangeFlowRunState
    from prefect.events.schemas.automations import EventTrigger, Posture

    trigger = EventTrigger(
        after={"prefect.flow-run.heartbeat"},
        expect={"prefect.flow-run.heartbeat", *(f"prefect.flow-run.{e}" for e in FINAL_EVENTS)},
        match={"prefect.resource.id": ["prefect.flow-run.*"]},
        match_related={"prefect.resource.role": "flow", "prefect.resource.name": TRAINING_FLOW},
        for_each={"prefect.resource.id"},
        posture=Posture.Proactive,
        threshold=1,
        within=timedelta(seconds=zombie_after_s),
    )
    action = ChangeFlowRunState(
        state=StateType.CRASHED,
        message=f"no heartbeat for {zombie_after_s} s: the machine running it is gone",
    )
    automation = Automation(
        name=ZOMBIE_AUTOMATION,
        description="Marks a training run Crashed when its heartbeats stop, so it is resumed.",
        trigger=trigger,
        actions=[action],
    )
    try:
        existing = Automation.read(name=ZOMBIE_AUTOMATION)
    except ValueError:
        automation.create()
    else:
        automation.id = existing.id
        automation.update()


def deploy(
    gpu_image: str | None = None,
    gcp_region: str | None = None,
    zombie_after_s: int = 90,
    git_repository: str | None = None,
    git_branch: str = "main",
) -> list[str]:
    """Register the local variants; the remote ones, whose workers clone `git_repository`, when
    it is given; the l4-gpu ones when an image and a region are. Returns the names of the
    deployments registered."""
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        raise DeployError(
            "tucano deploy needs a Prefect server: start one (prefect server start) and set "
            "PREFECT_API_URL, e.g. http://127.0.0.1:4200/api"
        )
    if bool(gpu_image) != bool(gcp_region):
        raise DeployError("--gpu-image and --gcp-region go together (the l4-gpu pool needs both)")
    variants = {
        "local": LOCAL_DEPLOYMENTS,
        "remote": REMOTE_DEPLOYMENTS if git_repository else (),
        "l4-gpu": GPU_DEPLOYMENTS if gpu_image else (),
    }
    names = [name for deployments in variants.values() for name in deployments]
    for pool, deployments in variants.items():
        if deployments:
            ensure_pool(pool)
    env = {
        **os.environ,
        "PREFECT_API_URL": str(PREFECT_API_URL.value()),
        "TUCANO_PROJECT_DIR": str(REPO_ROOT),
        "TUCANO_IMAGE": gpu_image or "",
        "TUCANO_GCP_REGION": gcp_region or "",
        "TUCANO_GIT_REPOSITORY": git_repository or "",
        "TUCANO_GIT_BRANCH": git_branch,
    }
    command = [sys.executable, "-m", "prefect", "--no-prompt", "deploy"]
    command += ["--prefect-file", str(PREFECT_FILE)]
    for name in names:
        command += ["--name", name]
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise DeployError(f"prefect deploy failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    ensure_zombie_automation(zombie_after_s)
    return names
