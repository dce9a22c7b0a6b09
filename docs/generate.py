"""Write the documentation's generated content into the repository: the recipe reference, the
command-line reference and the Results page, and each recorded figure between the result markers
of the manual's pages. The pages are committed, so a page reads the same in a clone or on a forge
as on the site; tests/test_docs.py fails, naming this command, when a page differs from what it
would write (a recipe field, an option or a record changed).

    .venv/bin/python docs/generate.py
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import types
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def script(name: str) -> types.ModuleType:
    """One of the page scripts beside this file (they are scripts, not a package's modules)."""
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generated() -> dict[Path, str]:
    """Every page this writes, with its text."""
    results = script("gen_results")
    pages = {
        DOCS / results.PAGE: results.results_page(),
        **{
            DOCS / page.PAGE: page.reference_page()
            for page in (script("gen_recipe_reference"), script("gen_cli_reference"))
        },
    }
    for path in sorted(DOCS.rglob("*.md")):
        if path not in pages and results.MARKER.search(text := path.read_text(encoding="utf-8")):
            pages[path] = results.fill(text)
    return pages


def _write(path: Path, text: str) -> None:
    """`text` into `path` whole: a reader never sees half a page."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text)
    os.replace(temporary, path)


def main() -> None:
    for path, text in generated().items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            _write(path, text)
            print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
