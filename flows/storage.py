"""Prefect's persisted results (the task cache) live inside the artifact store, local or s3://,
so results and the artifacts they point to live and die together, on every machine."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, TypeVar

from prefect import Flow
from prefect.filesystems import RemoteFileSystem

from tasks.core.store import ArtifactStore

RESULTS_FOLDER = ".prefect-results"
F = TypeVar("F", bound=Flow[Any, Any])


def result_storage(store: ArtifactStore) -> Path | RemoteFileSystem:
    """A folder for a local store; for s3://, a block saved on the Prefect server (Prefect only
    takes saved ones) that names the bucket and prefix and no credentials: s3fs reads those from
    the environment of whichever machine runs the flow."""
    if store.is_local:
        return Path(store.path(RESULTS_FOLDER))
    uri = store.uri(RESULTS_FOLDER)
    block = RemoteFileSystem(basepath=uri)
    block.save(f"tucano-results-{hashlib.sha256(uri.encode()).hexdigest()[:12]}", overwrite=True)
    return block


def in_store(flow: F, store: ArtifactStore) -> F:
    """`flow` with its results, and its subflows' and tasks', kept in `store`."""
    return flow.with_options(result_storage=result_storage(store))
