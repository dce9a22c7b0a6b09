"""The documentation cannot drift from the code: the recipe reference page (written by
docs/generate.py from docs/gen_recipe_reference.py) names every field of every pydantic model in
configs/recipe.py with its default, and every field has a description to show. The models are
found by walking the module, so a model or a field added without a description fails here. The
generated pages in the repository are what the scripts write. The README stays a page."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from configs import recipe

ROOT = Path(__file__).resolve().parent.parent


def _docs_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PAGE = _docs_script("gen_recipe_reference").reference_page()

# Every public pydantic model that configs/recipe.py defines, and each of its fields.
MODELS = [
    value
    for name, value in vars(recipe).items()
    if isinstance(value, type)
    and issubclass(value, BaseModel)
    and value.__module__ == recipe.__name__
    and not name.startswith("_")
]
FIELDS = [(model, name, info) for model in MODELS for name, info in model.model_fields.items()]
FIELD_IDS = [f"{model.__name__}.{name}" for model, name, _ in FIELDS]


def _section(model: type[BaseModel]) -> str:
    """The model's part of the page: from its heading to the next one."""
    start = PAGE.index(f"## {model.__name__} ")
    end = PAGE.find("\n## ", start + 1)
    return PAGE[start : end if end != -1 else len(PAGE)]


def _expected_default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.default_factory() if info.default_factory else info.default
    if isinstance(value, BaseModel):
        return type(value).__name__
    return json.dumps(value, ensure_ascii=False).replace("|", "\\|")


def test_every_recipe_model_is_found() -> None:
    # The walk itself: the recipe and its sections, at least, are there.
    names = {model.__name__ for model in MODELS}
    assert {"Recipe", "DataConfig", "TrainingConfig", "MonitoringConfig"} <= names
    assert len(FIELDS) > 100


@pytest.mark.parametrize(("model", "name", "info"), FIELDS, ids=FIELD_IDS)
def test_every_field_is_on_the_page_with_its_default(
    model: type[BaseModel], name: str, info: FieldInfo
) -> None:
    rows = [line for line in _section(model).splitlines() if line.startswith(f"| `{name}` |")]
    assert len(rows) == 1, f"{model.__name__}.{name} is not in the recipe reference"
    assert _expected_default(info) in rows[0]


@pytest.mark.parametrize(("model", "name", "info"), FIELDS, ids=FIELD_IDS)
def test_every_field_has_a_description(model: type[BaseModel], name: str, info: FieldInfo) -> None:
    assert (info.description or "").strip(), (
        f"{model.__name__}.{name} needs Field(..., description=...): the recipe reference shows it"
    )


def test_the_readme_is_a_page_with_both_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    assert "make pipeline" in readme
    assert "make test" in readme


def test_the_readme_s_numbers_are_the_recorded_run_s() -> None:
    """The README's report block is `docs/results.py readme`'s output from the default recipe's
    record, never typed: a number edited by hand, or a record not carried into the README,
    fails here."""
    results = _docs_script("results")
    record = json.loads((results.RESULTS / "cpu_smol.json").read_text(encoding="utf-8"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index(results.BEGIN) : readme.index(results.END) + len(results.END)]
    assert block == results.readme_block(record)
    assert record["recipe"] == "cpu_smol" and record["verdict"]["extraction"]["seeds"] == 3


def _scored(model: str, seed: int | None, prompt_id: str, total: float, answer: str) -> dict:
    return {
        "model": model,
        "seed": seed,
        "task": "extraction",
        "prompt_id": prompt_id,
        "total": total,
        "completion": answer,
    }


def test_the_example_is_the_best_seed_s_middle_complaint(tmp_path: Path) -> None:
    """Not the review GRPO changed most (the SFT model's worst reading, as it turned out), but the
    one- or two-star review at the median of the best seed's rewards, with how many of its
    answers to them are the SFT model's."""
    from tasks.core.store import ArtifactStore

    results = _docs_script("results")
    # "g", three stars and the seed's best answer, would move the median to "a" were it counted.
    stars = {"a": 1, "b": 2, "c": 1, "d": 5, "e": 2, "f": 4, "g": 3}
    prompts = {
        pid: {"review_score": n, "prompt": [{"content": f"review {pid}"}]}
        for pid, n in stars.items()
    }
    base = {"a": 0.2, "b": 0.9, "c": 0.6, "d": 0.95, "e": 0.5, "f": 0.7, "g": 0.9}
    # Seed 7 gained most: it changed "a" most (0.2 -> 0.8) and answers "c" as the SFT model did.
    tuned = {"a": 0.8, "b": 0.9, "c": 0.6, "d": 0.95, "e": 0.7, "f": 0.1, "g": 0.99}
    rows = [_scored("sft", None, pid, total, f"sft {pid}") for pid, total in base.items()]
    rows += [
        _scored("seed-7", 7, pid, total, f"sft {pid}" if pid in "bc" else f"seed {pid}")
        for pid, total in tuned.items()
    ]
    rows += [_scored("seed-3", 3, pid, 0.0, "{}") for pid in stars]
    store = ArtifactStore(tmp_path)
    store.write_text("scores.jsonl", "".join(json.dumps(row) + "\n" for row in rows))
    report = {
        "comparison": {
            "per_seed": {"7": {"extraction": {"delta": 0.05}}, "3": {"extraction": {"delta": -0.4}}}
        }
    }
    example = results._example(store, report, "scores.jsonl", prompts)
    # The complaints a, b, c, e by seed 7's reward: c 0.6, e 0.7, a 0.8, b 0.9; the median is e.
    assert example["prompt_id"] == "e" and example["seed"] == 7 and example["review"] == "review e"
    assert (example["complaints"], example["unchanged"]) == (4, 2)
    assert (example["sft"]["reward"], example["tuned"]["reward"]) == (0.5, 0.7)
    assert "what seed 7 answers after GRPO (0.70)" in results.example_caption(example)
    example["tuned"]["answer"] = example["sft"]["answer"]
    assert "word for word the same" in results.example_caption(example)
    # The seed shown kept its start: that is said of it, not of every seed (seed 3 moved).
    example["unchanged"] = example["complaints"]
    caption = results.example_caption(example)
    assert "the seed best on extraction, which kept the SFT model" in caption
    assert "every seed" not in caption


def test_the_cli_reference_has_every_subcommand_and_option_with_its_default() -> None:
    """The command-line reference is generated from the parser `tucano` runs
    (docs/gen_cli_reference.py): every subcommand has its section, every option its row with
    the default a reader gets."""
    import argparse

    from flows.cli import build_parser

    page = _docs_script("gen_cli_reference").reference_page()
    # The parser's own subcommands, not the generator's reading of them.
    subparsers = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    )
    assert {"pipeline", "train", "score", "deploy", "export", "analyze"} <= set(subparsers.choices)
    for name, parser in subparsers.choices.items():
        heading = f"## tucano {name} {{#{name}}}"
        assert heading in page, f"tucano {name} has no section in the command-line reference"
        start = page.index(heading)
        end = page.find("\n## ", start + 1)
        section = page[start : end if end != -1 else len(page)]
        for action in parser._actions:
            if not action.option_strings or "--help" in action.option_strings:
                continue
            rows = [
                r for r in section.splitlines() if r.startswith(f"| `{action.option_strings[0]}`")
            ]
            assert len(rows) == 1, f"tucano {name} {action.option_strings[0]} is not on the page"
            if action.required:
                assert "| required |" in rows[0]
            elif action.default not in (None, argparse.SUPPRESS):
                shown = str(action.default).removeprefix(str(ROOT) + "/")
                assert f"`{shown}`" in rows[0], f"tucano {name} {action.option_strings[0]}"


# A commit's short or full hash: 7 to 40 hex digits with a letter and a digit among them, as a
# word of its own (a 64-digit sha256 is not one; "deadbeef" and "2026112" are not hashes).
_COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
# The record: the changelog says what changed when; Results and the README's block are written
# from the recorded runs, which name their commit.
RECORD_PAGES = {"changelog.md", "results.md"}


def _manual_pages() -> list[Path]:
    docs = ROOT / "docs"
    return [
        p for p in sorted(docs.rglob("*.md")) if p.relative_to(docs).as_posix() not in RECORD_PAGES
    ]


def test_the_commit_pattern_knows_a_hash() -> None:
    assert _COMMIT.findall("since 039eddd, and bff758f0c1") == ["039eddd", "bff758f0c1"]
    assert not _COMMIT.findall(
        "deadbeef 2026112 sha256 b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    )


@pytest.mark.parametrize("page", _manual_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_manual_page_names_a_commit(page: Path) -> None:
    """The manual says what the program does, not when it changed: no commit hashes outside the
    record (the changelog, the generated Results page)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found = [f"line {n}: {m}" for n, line in enumerate(lines, 1) for m in _COMMIT.findall(line)]
    assert not found, f"{page.relative_to(ROOT)} names commits: {found}"


def test_the_results_page_is_every_record_s() -> None:
    """Results is generated from docs/results/*.json (docs/gen_results.py): each record's recipe,
    date, commit, time and verdict, none typed."""
    gen = _docs_script("gen_results")
    page = gen.results_page()
    records = [json.loads(p.read_text(encoding="utf-8")) for p in gen.RESULTS.glob("*.json")]
    assert records
    for record in records:
        start = page.index(f"## {record['recipe']} ")
        end = page.find("\n## ", start + 1)
        section = page[start : end if end != -1 else len(page)]
        assert f"| {record['date']} | `{record['commit']}` |" in section
        assert gen.duration(record["wall_seconds"]) in section
        for task, verdict in record["verdict"].items():
            row = next(line for line in section.splitlines() if line.startswith(f"| {task} |"))
            assert f"{verdict['delta_mean']:+.3f}" in row and f"**{verdict['verdict']}**" in row
        # Every earlier record of the recipe is a row of its runs' table, the latest among them.
        runs = gen.history(record["recipe"])
        assert runs[0]["commit"] == record["commit"]
        for run in runs:
            row = next(line for line in section.splitlines() if f"`{run['commit']}`" in line)
            assert gen.duration(run["wall_seconds"]) in row
            gain = run["verdict"]["extraction"]
            assert f"extraction {gain['verdict']} ({gain['seeds_significantly_better']} " in row


def _marked_pages() -> list[Path]:
    gen = _docs_script("gen_results")
    return [p for p in _manual_pages() if gen.MARKER.search(p.read_text(encoding="utf-8"))]


def test_the_manual_quotes_recorded_figures_through_markers() -> None:
    # The pages that say how long the default run takes, or show its report, do so by marker.
    names = {p.relative_to(ROOT / "docs").as_posix() for p in _marked_pages()}
    assert {"getting-started.md", "real-model.md", "how-to/read-a-report.md"} <= names


@pytest.mark.parametrize("page", _marked_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_result_marker_holds_its_record_s_figure(page: Path) -> None:
    gen = _docs_script("gen_results")
    text = page.read_text(encoding="utf-8")
    record = json.loads((gen.RESULTS / "cpu_smol.json").read_text(encoding="utf-8"))
    wall = f"<!-- result:cpu_smol:wall -->{gen.duration(record['wall_seconds'])}<!-- /result -->"
    assert "<!-- result:cpu_smol:wall -->" not in text or wall in text
    assert gen.fill(text) == text, f"{page.relative_to(ROOT)}: run docs/generate.py"


def test_a_marker_is_filled_from_its_record_and_one_no_record_holds_is_an_error() -> None:
    gen = _docs_script("gen_results")
    record = json.loads((gen.RESULTS / "cpu_smol.json").read_text(encoding="utf-8"))
    inline = "took <!-- result:cpu_smol:wall -->an hour<!-- /result --> here"
    wall = gen.duration(record["wall_seconds"])
    assert gen.fill(inline) == f"took <!-- result:cpu_smol:wall -->{wall}<!-- /result --> here"
    block = gen.fill("<!-- result:cpu_smol:stage times -->\nold\n<!-- /result -->")
    assert block == (
        f"<!-- result:cpu_smol:stage times -->\n\n{gen.stage_times(record)}\n\n<!-- /result -->"
    )
    with pytest.raises(KeyError, match="no record"):
        gen.fill("<!-- result:cpu_smol:wal --><!-- /result -->")
    with pytest.raises(KeyError, match="no record"):
        gen.fill("<!-- result:gpu_smol:wall --><!-- /result -->")


@pytest.mark.parametrize(
    "page",
    sorted(_docs_script("generate").generated().items()),
    ids=lambda item: item[0].relative_to(ROOT).as_posix(),
)
def test_every_generated_page_in_the_repository_is_current(page: tuple[Path, str]) -> None:
    """The references, Results and the recorded figures are committed as the scripts write them:
    a recipe field, an option or a record changed without `docs/generate.py` fails here."""
    path, text = page
    assert path.read_text(encoding="utf-8") == text, (
        f"{path.relative_to(ROOT)} is not what the code and the records say: "
        "run `.venv/bin/python docs/generate.py`"
    )
