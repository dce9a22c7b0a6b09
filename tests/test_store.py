from pathlib import Path

import pytest

from tasks.core.store import COMPLETE_MARKER, ArtifactStore


def test_files_are_written_whole_and_readable(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    store.write_json("a/b.json", {"x": 1})
    assert store.read_json("a/b.json") == {"x": 1}
    assert not list((tmp_path / "a").glob(".tmp-*"))
    assert (tmp_path / "a" / "b.json").stat().st_mode & 0o777 == 0o644


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    with pytest.raises(TypeError):
        store.write_bytes("a/b.bin", "not bytes")  # type: ignore[arg-type]
    assert list((tmp_path / "a").iterdir()) == []


def test_folder_is_complete_only_with_its_marker(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "weights.bin").write_bytes(b"123")
    store = ArtifactStore(tmp_path / "store")
    store.put_dir(source, "models/m")
    assert store.is_complete("models/m")
    assert store.local_dir("models/m").joinpath("weights.bin").read_bytes() == b"123"
    (tmp_path / "store" / "models" / "m" / COMPLETE_MARKER).unlink()
    with pytest.raises(FileNotFoundError, match="not a complete artifact"):
        store.local_dir("models/m")
