"""The command-line reference page, from `tucano`'s own argument parser (flows/cli.py).

The page is made from the parser the command uses, so an option added, removed or given another
default shows once `docs/generate.py` rewrites docs/cli-reference.md (tests/test_docs.py fails
until it has).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PAGE = "cli-reference.md"
# How the page names an option's type; an option with none takes text.
KINDS = {int: "an integer", float: "a number"}


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """Each subcommand's name, one-line help and parser, in the order `tucano --help` lists them."""
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
    return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.option_strings and "--help" not in a.option_strings]


def _metavar(action: argparse.Action) -> str:
    return action.metavar or action.dest.upper()


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def synopsis(name: str, parser: argparse.ArgumentParser) -> str:
    """`tucano train --seed SEED [--recipe RECIPE] ...`: what must be given first, then the rest."""
    words = [f"tucano {name}"]
    for action in sorted(options(parser), key=lambda a: not a.required):
        flag = action.option_strings[-1]
        word = f"{flag} {_metavar(action)}" if _takes_value(action) else flag
        words.append(word if action.required else f"[{word}]")
    return " ".join(words)


def default_text(action: argparse.Action) -> str:
    """The default as a reader would type it: a path inside the checkout relative to it."""
    if action.required:
        return "required"
    if action.default is None or action.default is argparse.SUPPRESS:
        return "–"
    value = action.default
    if isinstance(value, str) and Path(value).is_absolute():
        path = Path(value)
        if path.is_relative_to(ROOT):
            value = path.relative_to(ROOT).as_posix()
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def command_section(name: str, summary: str, parser: argparse.ArgumentParser) -> str:
    summary = _cell(summary)
    lines = [f"## tucano {name} {{#{name}}}", "", f"{summary[:1].upper()}{summary[1:]}.", ""]
    # A synopsis, not a command to copy: its brackets are no shell.
    lines += ["```text", synopsis(name, parser), "```", ""]
    lines += ["| option | default | what it is |", "| --- | --- | --- |"]
    for action in options(parser):
        flags = ", ".join(f"`{flag}`" for flag in action.option_strings)
        value = f" `{_metavar(action)}`" if _takes_value(action) else ""
        kind = f" ({KINDS.get(action.type, action.type.__name__)})" if action.type else ""
        lines.append(
            f"| {flags}{value}{kind} | {default_text(action)} | {_cell(action.help or '')} |"
        )
    if parser.epilog:
        lines += ["", "```text", parser.epilog, "```"]
    return "\n".join(lines) + "\n"


def reference_page() -> str:
    from flows.cli import build_parser

    parser = build_parser()
    commands = subcommands(parser)
    header = [
        "# Command-line reference",
        "",
        "Every `tucano` subcommand, its options and their defaults, generated from the argument",
        "parser `tucano` itself uses (`flows/cli.py`) by `docs/generate.py`.",
        "`tucano` is installed into `.venv/bin/`; `tucano SUBCOMMAND --help` prints the same.",
        "How the commands fit together, what they print and how they fail:",
        "[the command line](cli.md).",
        "",
        "| subcommand | what it does |",
        "| --- | --- |",
        *(f"| [`{name}`](#{name}) | {_cell(summary)} |" for name, summary, _ in commands),
        "",
    ]
    sections = [command_section(name, summary, sub) for name, summary, sub in commands]
    return "\n".join(header) + "\n" + "\n".join(sections)
