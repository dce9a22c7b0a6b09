"""Shared fixtures: the shipped Olist data, one real data prep, a Prefect test server."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from configs.recipe import DataConfig, ModelConfig, TinyModelConfig
from tasks.core.manifests import BaseModelArtifact, PreparedData
from tasks.core.store import ArtifactStore
from tasks.prep.build import prepare_data
from tasks.prep.olist import fingerprint_source

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
