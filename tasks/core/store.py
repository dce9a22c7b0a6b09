"""The artifact store: one root URI (a folder or s3://bucket/prefix) for everything a run makes.

Writes are all-or-nothing. A file is written to a temporary name and renamed (locally) or put as
one object (S3, where a PUT is atomic). A folder (a model, a checkpoint) is complete only once its
marker file exists, and the marker is written last, so a reader never sees half a folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec

COMPLETE_MARKER = "_COMPLETE"
# Artifacts are shared with other readers (workers, a UI container); temp files are owner-only.
ARTIFACT_FILE_MODE, ARTIFACT_DIR_MODE = 0o644, 0o755


class ArtifactStore:
    def __init__(self, root: str | os.PathLike[str]):
        root = str(root)
        self.fs, path = fsspec.core.url_to_fs(root)
        self.is_local = self.fs.protocol in ("file", "local") or "file" in self.fs.protocol
        self.root = os.path.abspath(path) if self.is_local else path.rstrip("/")
        self.root_uri = self.root if self.is_local else f"{_protocol(self.fs)}://{self.root}"

    def __repr__(self) -> str:
        return f"ArtifactStore({self.root_uri!r})"

    def cache_token(self) -> None:
        # Cached results live inside the store itself, so its location never enters a cache key.
        return None

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel.strip('/')}" if rel else self.root

    def uri(self, rel: str) -> str:
        return self.path(rel) if self.is_local else f"{_protocol(self.fs)}://{self.path(rel)}"

    def url(self, rel: str) -> str:
        """An address a link can carry: file:// for a local store, the store's URI otherwise."""
        return Path(self.path(rel)).as_uri() if self.is_local else self.uri(rel)

    def exists(self, rel: str) -> bool:
        return self.fs.exists(self.path(rel))

    # ---- files ---------------------------------------------------------------------------
    def write_bytes(self, rel: str, data: bytes) -> str:
        target = self.path(rel)
        if self.is_local:
            with _staged(Path(target), data) as staged:
                os.replace(staged, target)
        else:
            self.fs.pipe_file(target, data)
        return self.uri(rel)

    def create_exclusive(self, rel: str, data: bytes) -> bool:
        """Write a file only where none exists: True when this call created it, False when one
        was there. Of writers racing for one name exactly one gets True, and nobody overwrites
        the winner (what a lock needs). Locally a complete temporary file is hard-linked to the
        name, which fails if the name exists, so no reader sees it half-written; on S3 the PUT
        carries `If-None-Match: *`, which S3 refuses (412) when the object exists."""
        target = self.path(rel)
        if self.is_local:
            with _staged(Path(target), data) as staged:
                try:
                    os.link(staged, target)
                except FileExistsError:
                    return False
            return True
        try:
            self.fs.pipe_file(target, data, mode="create")
        except FileExistsError:  # s3fs's name for the 412
            return False
        except OSError as exc:
            # AWS answers 409 when a delete of the same name is in flight: not created either.
            if _s3_error_code(exc) == "ConditionalRequestConflict":
                return False
            raise
        return True

    def forget_listings(self, rel: str | None = None) -> None:
        """Drop what this process cached of the listing of `rel`, or of every listing (s3fs keeps
        them): what another process wrote since must be seen, not an earlier listing."""
        self.fs.invalidate_cache(None if rel is None else self.path(rel))

    def write_text(self, rel: str, text: str) -> str:
        return self.write_bytes(rel, text.encode("utf-8"))

    def write_json(self, rel: str, obj: Any) -> str:
        return self.write_text(rel, json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=True))

    def write_jsonl(self, rel: str, rows: list[dict[str, Any]]) -> str:
        lines = (json.dumps(row, ensure_ascii=False, sort_keys=True) for row in rows)
        return self.write_text(rel, "".join(line + "\n" for line in lines))

    def read_bytes(self, rel: str) -> bytes:
        return self.fs.cat_file(self.path(rel))

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8")

    def read_json(self, rel: str) -> Any:
        return json.loads(self.read_text(rel))

    def read_jsonl(self, rel: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.read_text(rel).splitlines() if line.strip()]

    def sha256(self, rel: str) -> str:
        return hashlib.sha256(self.read_bytes(rel)).hexdigest()

    # ---- folders -------------------------------------------------------------------------
    def put_dir(self, local_dir: str | os.PathLike[str], rel: str) -> str:
        """Upload a folder so that it is complete or invisible: files first, marker last."""
        local_dir = Path(local_dir)
        files = sorted(p for p in local_dir.rglob("*") if p.is_file())
        digest = digest_folder(local_dir)
        if self.is_local:
            target = Path(self.path(rel))
            staging = target.parent / f".tmp-{target.name}-{uuid.uuid4().hex[:8]}"
            shutil.copytree(local_dir, staging)
            staging.chmod(ARTIFACT_DIR_MODE)  # temporary folders are created owner-only
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        else:
            if self.fs.exists(self.path(rel)):
                self.fs.rm(self.path(rel), recursive=True)
            for file in files:
                self.fs.put_file(str(file), self.path(f"{rel}/{file.relative_to(local_dir)}"))
        self.write_text(f"{rel}/{COMPLETE_MARKER}", digest)
        return self.uri(rel)

    def listdir(self, rel: str) -> list[str]:
        """Names directly under a folder (empty when it does not exist)."""
        if not self.exists(rel):
            return []
        return sorted(
            entry.rstrip("/").rsplit("/", 1)[-1]
            for entry in self.fs.ls(self.path(rel), detail=False)
        )

    def remove(self, rel: str) -> None:
        """Delete a folder: its marker first, so it turns invisible before it turns partial."""
        if self.is_complete(rel):
            self.fs.rm(self.path(f"{rel}/{COMPLETE_MARKER}"))
        if self.exists(rel):
            self.fs.rm(self.path(rel), recursive=True)

    def get_dir(self, rel: str, local_dir: str | os.PathLike[str]) -> Path:
        """Copy a folder's files (not its marker) to a new local folder."""
        local_dir = Path(local_dir)
        local_dir.parent.mkdir(parents=True, exist_ok=True)
        if self.is_local:
            shutil.copytree(
                self.path(rel), local_dir, ignore=shutil.ignore_patterns(COMPLETE_MARKER)
            )
        else:
            self.fs.get(self.path(rel) + "/", str(local_dir) + "/", recursive=True)
            (local_dir / COMPLETE_MARKER).unlink(missing_ok=True)
        return local_dir

    def is_complete(self, rel: str) -> bool:
        return self.exists(f"{rel}/{COMPLETE_MARKER}")

    def dir_digest(self, rel: str) -> str:
        """The content digest recorded in a complete folder's marker."""
        return self.read_text(f"{rel}/{COMPLETE_MARKER}").strip()

    def local_dir(self, rel: str, cache_root: str | os.PathLike[str] | None = None) -> Path:
        """A local folder with a complete artifact's files (the store's own, when it is local)."""
        if not self.is_complete(rel):
            raise FileNotFoundError(
                f"{self.uri(rel)} is not a complete artifact (no {COMPLETE_MARKER})"
            )
        if self.is_local:
            return Path(self.path(rel))
        cache_root = Path(cache_root or tempfile.gettempdir()) / "tucano-store-cache"
        target = cache_root / self.dir_digest(rel)
        if not target.exists():
            staging = cache_root / f".tmp-{uuid.uuid4().hex[:8]}"
            self.fs.get(self.path(rel) + "/", str(staging) + "/", recursive=True)
            (staging / COMPLETE_MARKER).unlink(missing_ok=True)
            staging.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.replace(staging, target)
            except OSError:
                # Another process on this machine (a seed beside this one) fetched the same
                # digest first: its copy is this one.
                if not target.is_dir():
                    raise
                shutil.rmtree(staging)
        return target


@contextlib.contextmanager
def _staged(target: Path, data: bytes) -> Iterator[str]:
    """A complete temporary file beside `target`, to be moved or linked there; gone afterwards."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, staged = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    try:
        os.fchmod(fd, ARTIFACT_FILE_MODE)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        yield staged
    finally:
        Path(staged).unlink(missing_ok=True)


def _s3_error_code(exc: BaseException) -> str | None:
    response = getattr(exc.__cause__, "response", None) or {}
    return response.get("Error", {}).get("Code")


def _protocol(fs: fsspec.AbstractFileSystem) -> str:
    return fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]


def digest_folder(root: Path) -> str:
    """Digest of a folder's file names and contents (its marker excluded)."""
    digest = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        if file.name == COMPLETE_MARKER:
            continue
        digest.update(str(file.relative_to(root)).encode())
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()
