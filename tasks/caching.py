"""Cache keys from content, not paths.

A task's key hashes (a) the source of the code it runs, module by module, and (b) its inputs,
where a manifest stands for its content fingerprint and the artifact store for nothing at all.
So moving the data folder or the checkout changes no key, while editing one CSV or one config
value changes exactly the keys of the tasks that read it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
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


@functools.cache
def source_digest(modules: tuple[str, ...]) -> str:
    """Digest of the source files of the named modules (a package counts all its files)."""
    digest = hashlib.sha256()
    for name in modules:
        module = importlib.import_module(name)
        origin = Path(module.__file__ or "")
        files = sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py" else [origin]
        for file in files:
            digest.update(f"{name}:{file.name}".encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def files_digest(paths: tuple[Path, ...]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@dataclass
class ContentKey(CachePolicy):
    """Key = code of `modules` + content of `files` + content tokens of the inputs."""

    modules: tuple[str, ...] = field(default_factory=tuple)
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
            task_ctx.task.name, source_digest(self.modules), files_digest(self.files), tokens
        )
