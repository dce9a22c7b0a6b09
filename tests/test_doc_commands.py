"""Every command the documentation shows runs as written, and every file it links exists.

A reader copies what a page shows: each fenced `tucano ...` line must parse against the real
argument parser (flows/cli.py), each fenced `make` target must be one of the Makefile's, each
`pip install` must mean in a shell what it says (a `>=` left unquoted is a redirect: pip then
installs the package unpinned), and each relative link must reach a file. The artifact tree the
README shows is held to the names the code writes into the store. A failure names the file and
the line."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shlex
from pathlib import Path

import pytest
from packaging.requirements import InvalidRequirement, Requirement

from flows.cli import build_parser

from .doc_markdown import ROOT, Line, fenced_blocks, fenced_lines, inline_code, links, pages

PAGES = pages()
# Shell words that end a command: what follows is another command, a redirect or a comment.
_ENDS = {"&", "&&", "|", "||", ";", ">", ">>", "<", "2>", "2>&1"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _words(text: str) -> list[str]:
    """The shell words of one command, up to the first that ends it (`&`, `|`, `;`, `>`...);
    comments dropped, quotes removed."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = []
    for word in lexer:
        if word in _ENDS or set(word) <= set("&|;<>"):
            break
        words.append(word)
    return words


def _program(words: list[str]) -> tuple[str, list[str]]:
    """The program a command runs (its path's last part) and its arguments, past `VAR=value`s."""
    while words and _ASSIGNMENT.match(words[0]):
        words = words[1:]
    return (Path(words[0]).name, words[1:]) if words else ("", [])


def _commands(program: str) -> list[Line]:
    found = []
    for path in PAGES:
        for line in fenced_lines(path):
            with contextlib.suppress(ValueError):  # not shell: JSON, YAML, a review's text
                name, args = _program(_words(line.text))
                if name == program:
                    found.append(Line(line.path, line.number, shlex.join(args)))
    return found


TUCANO = _commands("tucano")
MAKE = _commands("make")


def test_the_checks_find_the_commands() -> None:
    # The collectors themselves: a change that found none would pass every check below.
    assert len(TUCANO) >= 15
    assert len(MAKE) >= 4


@pytest.mark.parametrize("line", TUCANO, ids=[line.where for line in TUCANO])
def test_every_tucano_command_parses(line: Line) -> None:
    parser = build_parser()
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(shlex.split(line.text))
    except SystemExit as exc:
        # `--help` exits 0 after printing: a command a reader may run.
        # argparse's last line is its error ("tucano: error: unrecognized arguments: ...").
        reason = errors.getvalue().strip().splitlines()[-1:]
        assert exc.code == 0, f"{line.where}: `tucano {line.text}`: {' '.join(reason)}"


def _makefile_targets() -> set[str]:
    """The Makefile's targets, its `:=`, `=` and `?=` variables expanded (`$(STAMP)` is
    `.venv/.installed`, a target a reader may type)."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    variables: dict[str, str] = {}
    targets: set[str] = set()

    def expand(value: str) -> str:
        for _ in range(10):
            value = re.sub(r"\$\((\w+)\)", lambda m: variables.get(m.group(1), ""), value)
        return value

    for raw in text.splitlines():
        if raw.startswith(("\t", "#")) or not raw.strip():
            continue
        assignment = re.match(r"^(\w+)\s*(?::=|\?=|=)\s*(.*)$", raw)
        if assignment:
            variables[assignment.group(1)] = assignment.group(2).split("#")[0].strip()
            continue
        rule = re.match(r"^([^:#=]+):(?!=)", raw)
        if rule:
            targets.update(expand(rule.group(1)).split())
    return targets - {".PHONY"}


def test_the_makefile_s_targets_are_read() -> None:
    targets = _makefile_targets()
    assert {"pipeline", "test", "smoke", "docs", ".venv/.installed"} <= targets


@pytest.mark.parametrize("line", MAKE, ids=[line.where for line in MAKE])
def test_every_make_target_exists(line: Line) -> None:
    targets = _makefile_targets()
    asked = [word for word in shlex.split(line.text) if not word.startswith("-")]
    asked = [word for word in asked if not _ASSIGNMENT.match(word)]
    missing = [target for target in asked if target not in targets]
    assert not missing, f"{line.where}: `make {line.text}`: no such target {missing}"


def _pip_installs() -> list[Line]:
    """Every `pip install` a reader may paste: fenced lines and inline code."""
    found = []
    for path in PAGES:
        for line in [*fenced_lines(path), *inline_code(path)]:
            if re.search(r"(^|\s|/)pip3? install\b", line.text):
                found.append(line)
    return found


PIP = _pip_installs()


def _pip_problem(text: str) -> str | None:
    """Why `text` does not do in a shell what it says, or None."""
    try:
        shlex.split(text, comments=True)
    except ValueError as exc:
        return f"not valid shell: {exc}"
    # Quotes kept (posix=False): a word that is not quoted and holds a redirect, a pipe or a glob
    # is read by the shell, not by pip.
    lexer = shlex.shlex(text, posix=False)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    for word in lexer:
        if word[:1] in "\"'":
            continue
        if word in {"&", "&&", ";", "|"}:
            break
        for char, meaning in (("<", "a redirect"), (">", "a redirect"), ("[", "a glob")):
            if char in word:
                return f"`{word}` unquoted: the shell reads {char} as {meaning}; quote it"
    words = _words(text)
    start = next(i for i, word in enumerate(words) if word == "install") + 1
    takes_value = {"-e", "--editable", "-r", "--requirement", "-c", "--constraint", "-i"}
    skip = False
    for word in words[start:]:
        if skip or word.startswith("-"):
            skip = word in takes_value
            continue
        if word.startswith((".", "/")) or "/" in word:
            continue  # a path: the project itself, a wheel
        try:
            Requirement(word)
        except InvalidRequirement as exc:
            return f"`{word}` is not a requirement pip reads: {exc}"
    return None


def test_the_pip_checks_find_the_installs() -> None:
    assert len(PIP) >= 2


@pytest.mark.parametrize("line", PIP, ids=[line.where for line in PIP])
def test_every_pip_install_is_valid_shell_with_its_specifiers_quoted(line: Line) -> None:
    problem = _pip_problem(line.text)
    assert problem is None, f"{line.where}: `{line.text}`: {problem}"


def test_the_pip_check_knows_a_redirect_from_a_specifier() -> None:
    # The check itself, on the two ways a specifier is written.
    assert _pip_problem("pip install prefect-gcp>=0.6.22") is not None
    assert _pip_problem('pip install "prefect-gcp>=0.6.22"') is None
    assert _pip_problem("pip install -e .[gpu]") is not None
    assert _pip_problem('.venv/bin/pip install -e ".[gpu]"') is None


def _local_links() -> list[Line]:
    found = []
    for path in PAGES:
        for line in links(path):
            target = line.text
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # another site, a mail address, a heading of the same page
            found.append(line)
    return found


LINKS = _local_links()


def test_the_link_check_finds_the_links() -> None:
    assert len(LINKS) >= 50


@pytest.mark.parametrize("line", LINKS, ids=[f"{line.where}:{line.text}" for line in LINKS])
def test_every_linked_file_exists(line: Line) -> None:
    """In the repository too: the generated pages are committed (docs/generate.py)."""
    target = line.text.split("#", 1)[0]
    assert (line.path.parent / target).exists(), f"{line.where}: links {line.text}, no such file"


def test_every_benchmark_section_names_its_script() -> None:
    """benchmarks/README.md heads each section with the script it measures: that file exists."""
    readme = ROOT / "benchmarks" / "README.md"
    scripts = re.findall(r"^#+ `([^`]+\.py)`", readme.read_text(encoding="utf-8"), re.MULTILINE)
    assert scripts
    missing = [name for name in scripts if not (readme.parent / name).exists()]
    assert not missing, f"benchmarks/README.md heads sections with scripts it lacks: {missing}"


# What a run writes into the store, each name with the code that writes it: a module and a string
# of its source (a constant's value, an f-string's head), so a folder renamed in the code fails
# here as the README's tree does. No run is made for this check: the one the suite makes
# (tests/test_pipeline.py) trains, and its store is its module's alone.
TOP_LEVEL = {
    "prepared": ("tasks.prep.build", 'f"prepared/'),
    "packages": ("tasks.models.model", 'f"packages/'),
    "models": ("tasks.models.model", 'f"models/packaged-'),
    "sft": ("tasks.training.sft", 'f"sft/'),
    "runs": ("tasks.training.train", 'RUNS = "runs"'),
    "eval": ("tasks.evaluation.evaluate", 'f"eval/'),
    "reports": ("tasks.evaluation.report", 'f"reports/'),
    "pipeline": ("flows.pipeline", '"pipeline/latest.json"'),
    "locks": ("tasks.core.locks", 'LOCKS_FOLDER = "locks"'),
    ".prefect-results": ("flows.storage", 'RESULTS_FOLDER = ".prefect-results"'),
    "champion": ("tasks.evaluation.champion", '"champion/current.json"'),
    "retraining": ("tasks.evaluation.champion", '"retraining/decisions"'),
    "monitoring": ("tasks.production.monitoring", '"monitoring/latest.json"'),
    "exports": ("flows.production", 'f"exports/adapters/'),
}
RUN_FOLDER = {
    "checkpoints": ("tasks.training.train", 'f"{folder}/checkpoints"'),
    "best": ("tasks.training.grpo_callbacks", 'BEST_FOLDER, BEST_RECORD = "best", "best.json"'),
    "best.json": (
        "tasks.training.grpo_callbacks",
        'BEST_FOLDER, BEST_RECORD = "best", "best.json"',
    ),
    "final": ("tasks.training.train", 'FINAL_FOLDER = "final"'),
    "log_history.json": ("tasks.training.train", 'f"{run.folder}/log_history.json"'),
    "summary.json": ("tasks.training.train", 'f"{run.folder}/summary.json"'),
    "record.json": ("tasks.training.train", 'RECORD_FILE = "record.json"'),
}


@pytest.mark.parametrize("names", [TOP_LEVEL, RUN_FOLDER], ids=["top level", "runs/<run key>"])
def test_the_store_names_are_the_code_s(names: dict[str, tuple[str, str]]) -> None:
    for name, (module, written) in names.items():
        source = Path(importlib.util.find_spec(module).origin).read_text(encoding="utf-8")
        assert written in source, f"{module} no longer writes {name} ({written!r})"


def _readme_tree() -> tuple[set[str], set[str]]:
    """The README's artifact tree: the store's top-level entries, and those under runs/<run key>/.
    An entry is what a line says before its description (two spaces or more); an indented line
    is an entry under the one above, or that entry's description going on."""
    readme = ROOT / "README.md"
    tree = next(block for _, block in fenced_blocks(readme) if any("runs/" in b for b in block))
    top: set[str] = set()
    run: set[str] = set()
    parent = ""
    for raw in tree:
        entry = re.split(r"\s{2,}", raw.strip())[0]
        if not raw.startswith(" "):
            parent = entry
            top.update(name.strip().split("/")[0] for name in entry.split(","))
        elif parent.startswith("runs/") and re.match(r"^ {1,4}\S", raw):
            run.update(name.strip().split("/")[0] for name in entry.split(","))
    return top, run


def test_the_readme_s_artifact_tree_is_what_a_run_writes() -> None:
    top, run = _readme_tree()
    assert top == set(TOP_LEVEL), (
        f"README.md's artifact tree: missing {sorted(set(TOP_LEVEL) - top)}, "
        f"not written by a run {sorted(top - set(TOP_LEVEL))}"
    )
    assert run == set(RUN_FOLDER), (
        f"README.md's runs/<run key>/: missing {sorted(set(RUN_FOLDER) - run)}, "
        f"not written by a run {sorted(run - set(RUN_FOLDER))}"
    )


def test_the_home_page_reaches_the_main_guides_in_two_clicks() -> None:
    """A new user finds how to run on their own data, on S3 and with the UI from the home page."""
    docs = (ROOT / "docs").resolve()

    def reached(page: Path) -> set[Path]:
        targets = (line.text.split("#", 1)[0] for line in links(page))
        found = {(page.parent / t).resolve() for t in targets if t and ":" not in t}
        return {p for p in found if p.suffix == ".md" and p.exists()}

    home = docs / "index.md"
    one_click = reached(home)
    two_clicks = one_click.union(*(reached(page) for page in one_click))
    guides = {docs / "how-to" / name for name in ("own-data.md", "s3.md", "prefect-ui.md")}
    assert guides <= two_clicks, f"not within two clicks of the home page: {guides - two_clicks}"
