"""Cache keys from content, not paths.

A task's key hashes (a) the code it runs: its own module and every project module that module
imports, transitively, found by reading the import statements (also those inside functions), so
no hand-kept list can drift; and (b) its inputs, where a manifest stands for its content
fingerprint and the artifact store for nothing at all. Moving the data folder or the checkout
changes no key; editing one CSV, one config value or one line of code a task runs changes exactly
the keys of the tasks that depend on it (import it, transitively). The code is read as Python's
syntax tree, whose form belongs to the interpreter: another Python minor version gives other keys.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect.cache_policies import CachePolicy
from prefect.context import TaskRunContext
from prefect.utilities.hashing import hash_objects
from pydantic import BaseModel


def cache_token(value: Any) -> Any:
    """What of a task input enters its cache key."""
    if hasattr(value, "cache_token"):
        return value.cache_token()
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {str(k): cache_token(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [cache_token(v) for v in value]
    return value


# The checkout whose packages count as "the project": modules outside it (the standard library,
# torch, trl, ...) are pinned by the environment, not fingerprinted here.
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def module_file(name: str, root: Path) -> Path | None:
    """The source file of a project module or package, or None for any other module."""
    base = root.joinpath(*name.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imported_names(name: str, is_package: bool, tree: ast.Module) -> set[str]:
    """Every module an import statement of `tree` may load, anywhere in the file; `from a import
    b` counts both `a` and `a.b` (b may be a submodule), relative imports resolved."""
    package = name if is_package else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def direct_imports(module: str, root: Path = PROJECT_ROOT) -> set[str]:
    """The project modules `module`'s own import statements name (not their packages)."""
    file = module_file(module, root)
    if file is None:
        raise ModuleNotFoundError(f"{module} is no module of the project at {root}")
    names, _ = _read_module(module, file.name == "__init__.py", file.read_bytes())
    return {name for name in names if module_file(name, root) is not None} - {module}


def _with_parents(name: str) -> list[str]:
    """Importing a.b.c runs a/__init__.py and a/b/__init__.py too."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _strip_docstrings(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body[0] = ast.Pass()
    return tree


def _walk_project(module: str, root: Path) -> dict[str, tuple[Path, str]]:
    """`module` and every project module it imports, transitively: name -> (file, code). The
    code is the syntax tree without docstrings: comments, formatting and prose change no key,
    a changed statement, name or literal does."""
    found: dict[str, tuple[Path, str]] = {}
    # Each name is looked for once: the standard library's and torch's come up in most modules,
    # and with the modules parsed (once a process), looking for them again was most of a key's
    # time.
    seen: set[str] = set()
    pending = _with_parents(module)
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if (file := module_file(name, root)) is None:
            continue
        imported, code = _read_module(name, file.name == "__init__.py", file.read_bytes())
        for each in imported:
            pending.extend(_with_parents(each))
        found[name] = (file, code)
    return dict(sorted(found.items()))


@functools.lru_cache(maxsize=256)
def _read_module(name: str, is_package: bool, source: bytes) -> tuple[frozenset[str], str]:
    """The imports and docstring-free code of one module's source, parsed once per content: a
    process computing the keys of several tasks reads the same shared modules for each."""
    tree = ast.parse(source)
    imported = _imported_names(name, is_package, tree)
    return frozenset(imported), ast.dump(_strip_docstrings(tree))


def project_modules(module: str, root: Path = PROJECT_ROOT) -> dict[str, Path]:
    """`module` and every project module it imports, transitively, with their files."""
    return {name: file for name, (file, _) in _walk_project(module, root).items()}


def code_digest(module: str, root: Path = PROJECT_ROOT) -> str:
    """Digest of the code `module` runs inside the project (itself and its transitive imports)."""
    digest = hashlib.sha256()
    for name, (_, code) in _walk_project(module, root).items():
        digest.update(name.encode() + b"\0" + code.encode() + b"\0")
    return digest.hexdigest()


@functools.cache
def task_code_digest(module: str) -> str:
    """`code_digest` of the checkout this process runs, once per module: the source cannot change
    under a running process without it running stale code anyway."""
    return code_digest(module, PROJECT_ROOT)


def files_digest(paths: tuple[Path, ...]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@dataclass
class ContentKey(CachePolicy):
    """Key = the code the task's module runs + content of `files` (data the code reads) +
    content tokens of the inputs."""

    files: tuple[Path, ...] = field(default_factory=tuple)

    def compute_key(
        self,
        task_ctx: TaskRunContext,
        inputs: dict[str, Any],
        flow_parameters: dict[str, Any],
        **kwargs: Any,
    ) -> str | None:
        tokens = {name: cache_token(value) for name, value in sorted(inputs.items())}
        return hash_objects(
            task_ctx.task.name,
            task_code_digest(task_ctx.task.fn.__module__),
            files_digest(self.files),
            tokens,
        )


def identity_key(identity: Any) -> str:
    """A run's or folder's key from what identifies it (JSON-able): 16 hex digits, order-free."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
