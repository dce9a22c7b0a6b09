"""The project's rooms stay layered: each imports only from itself and the rooms below it, and
no module imports itself back through others (a cycle). Read from the import statements, so a
lazy import inside a function counts too."""

from __future__ import annotations

from graphlib import CycleError, TopologicalSorter

from tasks.core.caching import PROJECT_ROOT, direct_imports

# Lowest first: a room may import from the rooms before it, never from those after.
ROOMS = (
    "rewards",
    "configs",
    "tasks.core",
    "tasks.prep",
    "tasks.models",
    "tasks.generation",
    "tasks.training",
    "tasks.evaluation",
    "tasks.production",
    "flows",
)


def _modules() -> list[str]:
    names = []
    for top in ("rewards", "configs", "tasks", "flows"):
        for file in sorted((PROJECT_ROOT / top).rglob("*.py")):
            parts = file.relative_to(PROJECT_ROOT).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _room(module: str) -> int:
    matches = [i for i, room in enumerate(ROOMS) if module == room or module.startswith(room + ".")]
    return max(matches, default=-1)


MODULES = _modules()
GRAPH = {module: direct_imports(module) for module in MODULES}


def test_every_module_lives_in_a_room() -> None:
    assert {
        "tasks.core.store",
        "tasks.models.model",
        "tasks.generation.rollout",
        "tasks.training.train",
        "flows.cli",
    } <= set(MODULES)
    assert [m for m in MODULES if _room(m) < 0 and m != "tasks"] == []


def test_rooms_import_only_downward() -> None:
    upward = [
        f"{module} -> {imported}"
        for module, imports in GRAPH.items()
        for imported in imports
        if _room(imported) > _room(module)
    ]
    assert upward == []


def test_no_import_cycle() -> None:
    # A package's __init__ names what its modules import from it; only module edges can cycle.
    edges = {m: {i for i in imports if not i.startswith(m + ".")} for m, imports in GRAPH.items()}
    try:
        tuple(TopologicalSorter(edges).static_order())
    except CycleError as exc:
        raise AssertionError(f"import cycle: {' -> '.join(exc.args[1])}") from None


def test_a_cycle_would_be_found(tmp_path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def f():\n    import pkg.a\n")
    edges = {m: direct_imports(m, tmp_path) for m in ("pkg.a", "pkg.b")}
    assert edges == {"pkg.a": {"pkg", "pkg.b"}, "pkg.b": {"pkg.a"}}
    try:
        tuple(TopologicalSorter(edges).static_order())
    except CycleError:
        return
    raise AssertionError("the cycle pkg.a -> pkg.b -> pkg.a was not found")
