"""Shared fixtures: the shipped Olist data, one real data prep, a Prefect test server; how the
tests are spread over the xdist workers; the check that no process outlives the session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from configs.recipe import DataConfig, ModelConfig, TinyModelConfig
from tasks.core.manifests import BaseModelArtifact, PreparedData
from tasks.core.store import ArtifactStore
from tasks.prep.build import prepare_data
from tasks.prep.olist import fingerprint_source

from .isolation import LeftoverProcesses

REPO_ROOT = Path(__file__).resolve().parents[1]
SHIPPED_DATA = REPO_ROOT / "data" / "olist"
# The smallest Qwen2 that still exercises every code path: tests build it in about a second.
SMALLEST_QWEN2 = TinyModelConfig(
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    intermediate_size=64,
    tokenizer_vocab_size=600,
)


@pytest.fixture
def olist_copy(tmp_path: Path) -> Path:
    """A writable copy of the shipped Olist folder, for tests that break it."""
    target = tmp_path / "olist"
    shutil.copytree(SHIPPED_DATA, target)
    return target


@pytest.fixture(scope="session")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[ArtifactStore, PreparedData]:
    """The default data prep on the shipped data, run once for the whole session."""
    store = ArtifactStore(tmp_path_factory.mktemp("prep-store"))
    return store, prepare_data(fingerprint_source(str(SHIPPED_DATA)), DataConfig(), store)


def small_training_inputs(store: ArtifactStore) -> tuple[PreparedData, BaseModelArtifact]:
    """40 train prompts and the smallest Qwen2: enough for real GRPO steps in seconds."""
    from tasks.training.model import prepare_base_model

    data = prepare_data(
        fingerprint_source(str(SHIPPED_DATA)),
        DataConfig(
            train_size=40, eval_per_task={"extraction": 2, "sql_qa": 2, "insights": 2, "push": 2}
        ),
        store,
    )
    return data, prepare_base_model(ModelConfig(tiny=SMALLEST_QWEN2), data, store)


@pytest.fixture(scope="session")
def prefect_api():
    """A real (temporary, SQLite) Prefect server for the tests that run flows."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(LeftoverProcesses(config), "tucano-leftover-processes")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order xdist hands out work. With `--dist loadscope` a module is one unit, run by one
    worker (its module-scoped server or pipeline run is set up once), and the next unit goes to
    whichever worker is free: the modules with a slow test go first, so the longest work (the
    deployments' server and training runs, the SIGKILL/resume runs, the pipeline runs) starts at
    once instead of being left for the end. A module's tests keep their order. (Not
    `--dist loadgroup`: pytest-xdist 3.8 marks a group by renaming `item._nodeid`, which pytest 9
    no longer reads, so its groups are silently split.)"""
    modules: dict[Path, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.path, []).append(item)
    ordered = sorted(
        modules.values(), key=lambda tests: not any(t.get_closest_marker("slow") for t in tests)
    )
    items[:] = [item for tests in ordered for item in tests]
