"""Seeds as separate flow runs of the seeded-training deployment, and waiting for all of them.

A seed's run that crashes is replaced by automatic resume (flows/deployment_flows.py:
resume_training) with a new run tagged `resume-of:<crashed run id>`; waiting follows that chain
to the run that finishes. What a finished run hands back (its Adapter manifest) lies in the
artifact store under its flow-run id, so no Prefect result has to travel between machines.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags
from prefect.client.schemas.objects import FlowRun
from prefect.client.schemas.sorting import FlowRunSort
from prefect.deployments import run_deployment

from tasks.core.manifests import Adapter
from tasks.core.store import ArtifactStore

RESUME_TAG = "resume-of:"
POLL_SECONDS = 2.0


class SeedRunFailed(RuntimeError):
    """A seed's training run ended without an adapter and no resume took its place."""


def handoff_path(flow_run_id: UUID | str) -> str:
    return f"handoffs/{flow_run_id}.json"


def start_seeds(
    deployment: str, parameters: dict[int, dict[str, Any]], group: str
) -> dict[int, FlowRun]:
    """One flow run per seed, all scheduled at once; `group` makes a retried caller reuse its
    runs instead of starting them twice."""
    return {
        seed: run_deployment(
            deployment,
            parameters=params,
            timeout=0,
            idempotency_key=f"{group}-seed-{seed}",
            tags=[f"seed:{seed}"],
        )
        for seed, params in parameters.items()
    }


def _read(flow_run_id: UUID) -> FlowRun:
    with get_client(sync_client=True) as client:
        return client.read_flow_run(flow_run_id)


def successor(flow_run_id: UUID) -> FlowRun | None:
    """The run automatic resume started in place of a crashed one, if any."""
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                tags=FlowRunFilterTags(all_=[f"{RESUME_TAG}{flow_run_id}"])
            ),
            sort=FlowRunSort.EXPECTED_START_TIME_ASC,
            limit=1,
        )
    return runs[0] if runs else None


def wait_until_final(flow_run_id: UUID) -> FlowRun:
    while True:
        run = _read(flow_run_id)
        if run.state is not None and run.state.is_final():
            return run
        time.sleep(POLL_SECONDS)


def final_run(flow_run_id: UUID, resume_wait_s: float) -> FlowRun:
    """Follow a seed's runs through automatic resumes to the one that completes."""
    while True:
        run = wait_until_final(flow_run_id)
        if run.state.is_completed():
            return run
        if not run.state.is_crashed():
            raise SeedRunFailed(f"{run.name}: {run.state.name}: {run.state.message}")
        deadline = time.monotonic() + resume_wait_s
        while (next_run := successor(run.id)) is None and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        if next_run is None:
            raise SeedRunFailed(
                f"{run.name} crashed ({run.state.message}) and no resumed run started within "
                f"{resume_wait_s:.0f} s: the attempt limit was reached or automatic resume is "
                "not set up (tucano deploy)"
            )
        flow_run_id = next_run.id


def gather_adapters(
    runs: Iterable[FlowRun], store: ArtifactStore, resume_wait_s: float
) -> list[Adapter]:
    adapters = []
    for run in runs:
        done = final_run(run.id, resume_wait_s)
        adapters.append(Adapter.model_validate(store.read_json(handoff_path(done.id))))
    return adapters
