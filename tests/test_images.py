"""The images the project defines (deployments/*.Dockerfile). No Docker engine runs here, so what
is tested is what a build does with the project: the files it copies are enough for the
Makefile's own install (run dry in a fresh folder holding only those files) and for a package
with the code, the recipes and the default run's data, and a worker in the image finds the
environment that install makes."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import REPO_ROOT

IMAGES = {"gpu.Dockerfile": ".[gpu]", "cpu.Dockerfile": "."}
# The packages pyproject.toml installs, and the default run's recipe and data.
NEEDED = [
    "flows/deployment_flows.py",
    "tasks/core/store.py",
    "rewards/__init__.py",
    "configs/cpu_smol.yaml",
]
PIP_WHEEL = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments left out."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def _fresh_build_context(dockerfile: Path, folder: Path) -> dict[str, str]:
    """Copy what the Dockerfile's COPY lines take from the project into `folder`, as a build
    would into its WORKDIR; the Dockerfile's WORKDIR and ENV, by name."""
    seen = {}
    for instruction, arguments in _instructions(dockerfile):
        if instruction == "COPY":
            *sources, destination = shlex.split(arguments)
            for source in sources:
                origin = REPO_ROOT / source
                assert origin.exists(), f"{dockerfile.name} copies {source}, which is not there"
                target = folder / destination / (origin.name if origin.is_file() else "")
                if origin.is_dir():
                    shutil.copytree(origin, target, dirs_exist_ok=True)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, target)
        elif instruction in ("WORKDIR", "ENV"):
            seen[instruction] = arguments
        elif instruction == "RUN" and "make install" in arguments:
            seen["install"] = arguments
    return seen


@pytest.mark.parametrize("name", IMAGES)
def test_an_image_installs_the_project_as_the_makefile_does(name: str, tmp_path: Path) -> None:
    dockerfile = REPO_ROOT / "deployments" / name
    folder = tmp_path / "opt-tucano"
    folder.mkdir()
    seen = _fresh_build_context(dockerfile, folder)
    # the install is the Makefile's: its target, its variables, nothing of the image's own
    make = seen["install"][seen["install"].index("make install") :]
    dry = subprocess.run(
        [*shlex.split(make), "-n"], cwd=folder, capture_output=True, text=True, check=False
    )
    assert dry.returncode == 0, dry.stderr  # every file the install reads was copied
    assert f'-e "{IMAGES[name]}"' in dry.stdout, dry.stdout
    assert '"torch==2.13.0"' in dry.stdout
    # a worker, not make, starts an image's processes: the bytecode is written in the build
    assert "-m compileall" in dry.stdout
    # ... and from those files alone a package builds with the code and the recipes
    wheel = subprocess.run(
        [*PIP_WHEEL, "--no-cache-dir", "--wheel-dir", str(tmp_path / "wheel"), "."],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    assert wheel.returncode == 0, wheel.stderr[-3000:]
    (built,) = (tmp_path / "wheel").glob("*.whl")
    assert set(NEEDED) <= set(zipfile.ZipFile(built).namelist())
    assert (folder / "data" / "olist" / "olist_orders_dataset.csv").is_file()
    assert (folder / "data" / "audit" / "audit.jsonl").is_file()
    # a worker's `python -m prefect.engine` finds the environment the install made
    assert seen["WORKDIR"] == "/opt/tucano"
    assert "PATH=/opt/tucano/.venv/bin:$PATH" in seen["ENV"]
