"""What a person fills in to start a deployed run: pydantic models whose descriptions and limits
the Prefect UI shows as a validated form. Relative paths are read from the project folder the
worker runs the flow in (where `prefect.yaml` pulls the code)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

REPO_ROOT = Path(__file__).resolve().parents[1]
# Where a run reads its data and keeps its artifacts unless told: here, not in flows/pipeline.py,
# so that the command line's defaults cost no import of the flows (`tucano score`, `--help`).
DEFAULT_DATA = str(REPO_ROOT / "data" / "olist")
DEFAULT_ARTIFACTS = "./artifacts"
MAX_SEED = 2**32 - 1  # numpy's and torch's seed range


def project_path(value: str) -> str:
    """An absolute path or URI as given; a relative one inside the project folder."""
    if "://" in value or Path(value).is_absolute():
        return value
    return str(REPO_ROOT / value)


def portable_path(value: str) -> str:
    """A path as a worker on another machine reads it: one inside this project folder relative
    to it (each worker reads it in its own copy of the project), anything else as given."""
    if "://" in value or not Path(value).is_relative_to(REPO_ROOT):
        return value
    return str(Path(value).relative_to(REPO_ROOT))


class RunInputs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    recipe: str = Field(
        "configs/cpu_smol.yaml",
        min_length=1,
        description="Recipe YAML: a file under configs/ (e.g. configs/l4_v42.yaml on the GPU "
        "pool) or an absolute path on the worker.",
    )
    data: str = Field(
        "data/olist",
        min_length=1,
        description="Folder with the Olist CSV files: a project folder, an absolute path or "
        "s3://bucket/prefix.",
    )
    artifacts: str = Field(
        "artifacts",
        min_length=1,
        description="Artifact store shared by every worker: a folder or s3://bucket/prefix. "
        "Datasets, checkpoints, adapters, reports and Prefect results go there; S3 credentials "
        "come from the worker's environment.",
    )

    def paths(self) -> dict[str, str]:
        """The `recipe_path`, `artifacts`, `data` arguments of every flow in flows/pipeline.py."""
        return {
            "recipe_path": project_path(self.recipe),
            "artifacts": project_path(self.artifacts),
            "data": project_path(self.data),
        }


class TrainingRun(RunInputs):
    """One seed's GRPO training."""

    seed: int = Field(
        42,
        ge=0,
        le=MAX_SEED,
        description="Random seed of this run: data order, LoRA initialisation, sampling.",
    )
    attempt: int = Field(
        1, ge=1, description="Which attempt this is; automatic resume raises it after a crash."
    )
    max_attempts: int = Field(
        3,
        ge=1,
        le=20,
        description="Most runs of this training after crashes (this one included); each resumes "
        "from the last complete checkpoint.",
    )


class PipelineRun(RunInputs):
    """The whole DAG, every seed of the recipe as its own seeded-training run."""

    training_deployment: str | None = Field(
        None,
        description="The deployment (flow/deployment) each seed runs on as its own flow run, "
        "e.g. tucano-seeded-training/seeded-training on the GPU pool; empty trains every seed "
        "inside this flow run instead.",
    )
    resume_wait_s: float = Field(
        900,
        ge=0,
        description="Seconds to wait for automatic resume to replace a crashed seed's run.",
    )


class RetrainingRun(PipelineRun):
    """Scheduled retraining: train on changed data, promote only a significantly better model."""


class AnalysisRun(RunInputs):
    """Daily: the production model reads the new reviews; drift starts a retraining."""

    output: str = Field(
        "artifacts/analysis/reviews.jsonl",
        min_length=1,
        description="JSONL file of the rows, one per review, on the worker: a project path or an "
        "absolute one. A rerun skips the reviews already in it.",
    )
    model: str = Field(
        "champion",
        min_length=1,
        description="champion (the latest pipeline run's starting model while none is "
        "promoted), seed-N of the latest pipeline run, or on the worker an adapter folder or a "
        "model folder `tucano export` wrote.",
    )
    limit: int | None = Field(
        None, ge=1, description="Analyse at most this many new reviews (all when empty)."
    )
    retraining_deployment: str = Field(
        "tucano-scheduled-retraining/scheduled-retraining-local",
        min_length=1,
        description="The deployment (flow/deployment) a drift starts, once per drift.",
    )
