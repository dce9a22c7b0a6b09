"""A task's cache key follows the code it runs: every project module it imports, transitively.

The keys are computed on a copy of the project's packages, edited one module at a time, so the
test proves both directions for every cached task and every module: an edit to code a task
runs changes its key, an edit anywhere else (or to a comment or docstring) does not.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from prefect import Task

from tasks.core.caching import PROJECT_ROOT, ContentKey, code_digest, project_modules

from .conftest import copy_project
from .test_pipeline import CACHED_STAGES


def _cached_tasks() -> dict[str, str]:
    """Every Prefect task of the project whose cache key is a ContentKey: name -> its module.
    Only the modules that define one are imported: the others would load trl at collection."""
    found: dict[str, str] = {}
    for file in sorted((PROJECT_ROOT / "tasks").rglob("*.py")):
        if "cache_policy=ContentKey(" not in file.read_text(encoding="utf-8"):
            continue
        module = ".".join(file.relative_to(PROJECT_ROOT).with_suffix("").parts)
        for value in vars(importlib.import_module(module)).values():
            if isinstance(value, Task) and isinstance(value.cache_policy, ContentKey):
                found[value.name] = value.fn.__module__
    return found


CACHED_TASKS = _cached_tasks()


@pytest.fixture(scope="module")
def project_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_project(tmp_path_factory.mktemp("project"))


def test_every_cached_stage_is_found() -> None:
    assert set(CACHED_TASKS) == set(CACHED_STAGES)


@pytest.mark.parametrize(
    ("task", "uses", "does_not_use"),
    [
        # The modules the hand-kept lists had left out: they decide which adapter is exported.
        (
            "train-seed",
            {
                "tasks.training.grpo_callbacks",
                "tasks.training.stopping",
                "tasks.training.checkpoints",
                "tasks.training.dynamic_sampling",
            },
            {"tasks.evaluation.report", "tasks.prep.orders", "flows.pipeline"},
        ),
        (
            "report",
            {"tasks.evaluation.eval_summary", "tasks.evaluation.stats", "tasks.evaluation.plots"},
            {"tasks.training.train"},
        ),
        # SFT's callbacks are its own: GRPO's stop rules, reward logging and rollouts are not
        # SFT's code, and a change to them leaves its (7-minute) model where it is.
        (
            "sft",
            {
                "tasks.training.step_log",
                "tasks.training.checkpoint_callbacks",
                "tasks.training.checkpoints",
            },
            {
                "tasks.training.grpo_callbacks",
                "tasks.training.stopping",
                "tasks.training.heldout_readings",
                "tasks.generation.rollout",
                "tasks.training.train",
            },
        ),
        ("prepare-data", {"tasks.prep.orders", "rewards.extraction"}, {"tasks.training.train"}),
        ("evaluate-model", {"tasks.models.model", "rewards.sql_sandbox"}, {"tasks.prep.orders"}),
    ],
)
def test_a_task_s_code_is_what_it_imports(task: str, uses: set, does_not_use: set) -> None:
    modules = set(project_modules(CACHED_TASKS[task]))
    assert uses <= modules
    assert not does_not_use & modules


def test_editing_a_module_changes_exactly_the_keys_of_the_tasks_that_run_it(
    project_copy: Path,
) -> None:
    uses = {task: set(project_modules(module)) for task, module in CACHED_TASKS.items()}
    before = {task: code_digest(module, project_copy) for task, module in CACHED_TASKS.items()}
    files = sorted(project_copy.rglob("*.py"))
    assert len(files) > 40
    for file in files:
        name = ".".join(file.relative_to(project_copy).with_suffix("").parts)
        name = name.removesuffix(".__init__")
        original = file.read_text(encoding="utf-8")
        try:
            file.write_text(original + "\n_EDITED = 1\n", encoding="utf-8")
            after = {t: code_digest(m, project_copy) for t, m in CACHED_TASKS.items()}
        finally:
            file.write_text(original, encoding="utf-8")
        changed = {task for task in CACHED_TASKS if after[task] != before[task]}
        assert changed == {task for task, modules in uses.items() if name in modules}, name


def test_comments_and_docstrings_are_no_code(project_copy: Path) -> None:
    train = project_copy / "tasks" / "training" / "train.py"
    original = train.read_text(encoding="utf-8")
    before = code_digest("tasks.training.train", project_copy)
    try:
        train.write_text(
            original.replace('"""Step 3', '"""Reworded: step 3', 1) + "\n# a note\n",
            encoding="utf-8",
        )
        assert train.read_text(encoding="utf-8") != original
        assert code_digest("tasks.training.train", project_copy) == before
    finally:
        train.write_text(original, encoding="utf-8")


def test_relative_and_lazy_imports_count(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text("from . import b\nfrom ..c import f\n")
    (package / "sub" / "b.py").write_text("def g():\n    import pkg.d\n")
    (package / "c.py").write_text("def f(): ...\n")
    (package / "d.py").write_text("")
    (package / "unused.py").write_text("")
    assert set(project_modules("pkg.sub.a", tmp_path)) == {
        "pkg",
        "pkg.sub",
        "pkg.sub.a",
        "pkg.sub.b",
        "pkg.c",
        "pkg.d",
    }


def test_a_changed_trainer_starts_a_new_run(project_copy: Path, monkeypatch) -> None:
    """A run key without the code would resume the finished run and return its old adapter."""
    from configs.recipe import LoraConfig, TrainingConfig
    from tasks.core import caching
    from tasks.core.manifests import BaseModelArtifact, PreparedData
    from tasks.training import train

    data = PreparedData(fingerprint="d", folder="p", train="t", eval="e", database="db", counts={})
    base = BaseModelArtifact(fingerprint="b", source="tiny", location="m", in_store=True)

    def key_with_code_at(root: Path) -> str:
        monkeypatch.setattr(caching, "PROJECT_ROOT", root)
        caching.task_code_digest.cache_clear()
        return train.run_key(TrainingConfig(), LoraConfig(), data, base, 1, "peft")

    try:
        original = key_with_code_at(project_copy)
        stopping = project_copy / "tasks" / "training" / "stopping.py"
        source = stopping.read_text(encoding="utf-8")
        stopping.write_text(source + "\n_EDITED = 1\n", encoding="utf-8")
        try:
            assert key_with_code_at(project_copy) != original
        finally:
            stopping.write_text(source, encoding="utf-8")
        assert key_with_code_at(project_copy) == original
    finally:
        caching.task_code_digest.cache_clear()
