"""A long stage says where it is and how long it has left: in the log, and inside a Prefect run
as a progress artifact the UI shows."""

from __future__ import annotations

import logging

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId
from prefect.runtime import flow_run

from tasks.core.progress import Progress, artifact_key, duration


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("seconds", "said"),
    [(4.6, "5 s"), (220, "3 min 40 s"), (3900, "1 h 5 min")],
)
def test_durations_read_as_a_person_says_them(seconds: float, said: str) -> None:
    assert duration(seconds) == said


def test_the_time_left_is_the_time_so_far_spread_over_what_is_done(caplog) -> None:
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="tucano.progress"):
        progress = Progress("SFT", 80, "steps", clock=clock)
        clock.now += 55
        said = progress.advance(20)
        clock.now += 165
        last = progress.advance(80)
    assert said == "SFT: 20/80 steps (25%), 55 s in, about 2 min 45 s left"
    assert last == "SFT: 80/80 steps (100%), 3 min 40 s in"
    assert [r.getMessage() for r in caplog.records] == ["SFT: 0/80 steps (0%), 0 s in", said, last]


def test_a_resumed_stage_spreads_only_its_own_time(caplog) -> None:
    """Resumed at step 40 of 80: ten steps in a minute here leave 30 steps, three minutes."""
    clock = Clock()
    progress = Progress("GRPO seed 42", 80, "steps", done=40, clock=clock)
    clock.now += 60
    assert progress.advance(50).endswith("1 min 0 s in, about 3 min 0 s left")


def test_artifact_keys_are_what_prefect_accepts() -> None:
    assert artifact_key("GRPO seed 42") == "tucano-progress-grpo-seed-42"
    assert artifact_key("evaluation of seed-123") == "tucano-progress-evaluation-of-seed-123"


@pytest.mark.usefixtures("prefect_api")
def test_inside_a_flow_run_the_progress_is_an_artifact_of_that_run() -> None:
    @flow
    def stage() -> str:
        progress = Progress("analysis", 4, "reviews")
        for done in range(1, 5):
            progress.advance(done)
        return str(flow_run.get_id())

    run_id = stage()
    with get_client(sync_client=True) as client:
        [artifact] = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
        )
    assert (artifact.key, artifact.type) == ("tucano-progress-analysis", "progress")
    assert float(artifact.data) == 100.0
    assert artifact.description.startswith("analysis: 4/4 reviews (100%)")


def test_outside_a_run_nothing_is_published(monkeypatch) -> None:
    """Recorded, not raised: the publish path swallows what its artifact calls raise (progress
    is never worth stopping a stage for), so a raising stand-in would pass published or not."""
    import prefect.artifacts

    published: list[tuple] = []

    def record(*args, **kwargs):
        published.append((args, kwargs))

    monkeypatch.setattr(prefect.artifacts, "create_progress_artifact", record)
    monkeypatch.setattr(prefect.artifacts, "update_progress_artifact", record)
    progress = Progress("SFT", 2, "steps")
    assert progress.advance(1).startswith("SFT: 1/2 steps (50%)")
    assert progress.advance(2).startswith("SFT: 2/2 steps (100%)")
    assert published == []
    # The same stand-ins do record a publish when the stage says it runs inside a run.
    progress.publish = True
    progress.advance(2)
    assert len(published) == 1
