"""What tasks hand each other: where an artifact lies in the store and what its content is.

Tasks never pass models or tensors, only these small records. A manifest's cache token is its
content fingerprint, so a downstream task's cache key follows content, not location.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from pydantic import BaseModel, ConfigDict

from tasks.core.store import ArtifactStore


class Manifest(BaseModel):
    model_config = ConfigDict(frozen=True)

    fingerprint: str

    def cache_token(self) -> str:
        return self.fingerprint


class DataSource(Manifest):
    """The Olist CSV folder a run reads; fingerprint = digest of every file's bytes."""

    uri: str
    files: dict[str, str]


class PreparedData(Manifest):
    """Train and eval prompt sets plus the SQLite copy of the tables, under one store folder."""

    folder: str
    train: str
    eval: str
    database: str
    counts: dict[str, dict[str, int]]

    def local_database(self, store: ArtifactStore) -> Path:
        """A local path to the SQLite copy (downloaded once when the store is remote)."""
        return store.local_dir(self.folder) / PurePosixPath(self.database).name


class AuditResult(Manifest):
    passed: bool
    per_task: dict[str, dict[str, float | int | bool | str]]


# A BaseModelArtifact's source when it is the SFT model (the merged result of SFT).
SFT_SOURCE = "sft"


class BaseModelArtifact(Manifest):
    """A model to start from: a folder in the store (built tiny model) or a hub id / local path."""

    source: str
    location: str
    in_store: bool
    load_in_4bit: bool = False


class Adapter(Manifest):
    """A trained LoRA adapter for one seed, with its training record."""

    seed: int
    run_key: str
    folder: str
    log_history: str
    global_step: int
    best_step: int | None = None
    best_eval_reward: float | None = None
    stop_reason: str | None = None


class TrainingRecord(BaseModel):
    """A finished GRPO run, as `tucano train` or a pipeline left it: its adapter, the model it
    started from and the prompt sets it was trained on (whose eval split judges it), so that any
    later command can name it by seed, run key or adapter folder."""

    model_config = ConfigDict(frozen=True)

    finished_at: str
    adapter: Adapter
    base: BaseModelArtifact
    prepared: PreparedData


class EvalRows(Manifest):
    """Per-sample scores of one model on the eval split."""

    model_tag: str
    seed: int | None
    rows: str


class ReportArtifact(Manifest):
    report_json: str
    report_md: str
    scores: str
    plots: list[str] = []
