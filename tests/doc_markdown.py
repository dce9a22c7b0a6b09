"""What the documentation's markdown holds, as the doc checks read it: the pages, their fenced
code lines (with file and line, continuations joined), their inline code and their links.

Only what a reader copies or follows is read: commands in fenced shell blocks (a block with no
language or a shell's: a `text` block is what a program printed, a table's inline
`tucano train --seed N` is usage notation), `pip install` in inline code too (a reader pastes
that into a shell as it stands), and links outside code."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
# The languages a fenced block of commands is written in.
SHELL = {"", "sh", "bash", "shell", "console"}
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target), the target up to a space (a title may follow) or ")".
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


class Line(NamedTuple):
    path: Path
    number: int  # 1-based, the first line of a command continued with "\"
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.number}"


def pages() -> list[Path]:
    """Every markdown file a reader meets: the README, the changelog, the site's pages and the
    files the site includes whole (benchmarks/README.md)."""
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found += [path for path in (ROOT / "CHANGELOG.md", ROOT / "benchmarks" / "README.md")]
    return [path for path in found if path.exists()]


def fenced_lines(path: Path) -> Iterator[Line]:
    """Each line of each fenced shell block, a line ending in "\\" joined with the next."""
    fence: str | None = None
    shell = False
    pending: Line | None = None
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = _FENCE.match(raw)
        if fence is None:
            if match:
                fence, shell = match.group(2), match.group(3).strip().lower() in SHELL
            continue
        if match and match.group(2).startswith(fence) and not match.group(3).strip():
            fence, pending = None, None
            continue
        if not shell:
            continue
        text = raw.strip()
        if pending is not None:
            text, start = f"{pending.text} {text}", pending.number
        else:
            start = number
        if text.endswith("\\"):
            pending = Line(path, start, text[:-1].rstrip())
            continue
        pending = None
        yield Line(path, start, text)


def fenced_blocks(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Each fenced block's first content line number and its lines, as written."""
    fence: str | None = None
    block: list[str] = []
    start = 0
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = _FENCE.match(raw)
        if fence is None:
            if match:
                fence, block, start = match.group(2), [], number + 1
        elif match and match.group(2).startswith(fence) and not match.group(3).strip():
            fence = None
            yield start, block
        else:
            block.append(raw)


def prose_lines(path: Path) -> Iterator[Line]:
    """The lines outside fenced blocks, inline code removed from none of them."""
    fence: str | None = None
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = _FENCE.match(raw)
        if fence is None and match:
            fence = match.group(2)
        elif fence is not None:
            if match and match.group(2).startswith(fence) and not match.group(3).strip():
                fence = None
        else:
            yield Line(path, number, raw)


def inline_code(path: Path) -> Iterator[Line]:
    for line in prose_lines(path):
        for match in _INLINE_CODE.finditer(line.text):
            yield Line(path, line.number, match.group(2).strip())


def links(path: Path) -> Iterator[Line]:
    """Each link target outside code, as written (anchor included); a link's text may run over
    lines, as wrapped prose does."""
    text = ["" for _ in path.read_text(encoding="utf-8").splitlines()]
    for line in prose_lines(path):
        text[line.number - 1] = _INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line.text)
    joined = "\n".join(text)
    for match in _LINK.finditer(joined):
        yield Line(path, joined.count("\n", 0, match.start(1)) + 1, match.group(1))
