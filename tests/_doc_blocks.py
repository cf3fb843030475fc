"""The fenced code blocks of README.md and docs/*.md, and the placeholders they show.

Shared by the test that runs every block (``tests/spark/test_docs_examples.py``) and the one
that runs the README's batch quickstart through an installed wheel
(``tests/spark/test_installed_package.py``).

A block the docs tests do not run is marked on the line before its fence, where no reader
sees it (an HTML comment: GitHub and the site both hide it)::

    <!-- docs-test: skip: installs packages -->
    ```sh
    pip install 'pyspark-twopc[postgres]'
    ```
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from tests._paths import REPO_ROOT

ROOT = REPO_ROOT
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
PAGES = [p for p in PAGES if "_build" not in p.parts]
RUNNABLE = {"python": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
_FENCE = re.compile(r"^```(\w*)\s*$")
#: the marker of a block the docs tests skip, with the reason, on the line before the fence
SKIP = re.compile(r"^<!--\s*docs-test:\s*skip\b:?\s*(.*?)\s*-->\s*$")
#: what marked a skipped block inside the block before, where every reader saw it
VISIBLE_MARKER = "not run by the docs tests"


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    lang: str
    code: str
    skip_reason: str | None = None
    """Why the docs tests do not run the block (its ``docs-test: skip`` marker), else None."""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def skip_markers(page: Path) -> dict[int, str]:
    """The ``docs-test: skip`` markers of *page*: line number -> reason."""
    return {number: match.group(1) for number, line in enumerate(page.read_text().splitlines(), 1)
            if (match := SKIP.match(line))}


def blocks(page: Path) -> list[Block]:
    """The Python and shell blocks of *page*, in order, each with the skip marker of the line
    before its fence."""
    found: list[Block] = []
    lang: str | None = None
    start = 0
    body: list[str] = []
    reason: str | None = None
    previous = ""
    for number, line in enumerate(page.read_text().splitlines(), 1):
        match = _FENCE.match(line)
        if lang is None and match:
            lang, start, body = match.group(1), number, []
            skip = SKIP.match(previous)
            reason = skip.group(1) if skip else None
        elif lang is not None and line.startswith("```"):
            if lang in RUNNABLE:
                found.append(Block(page, start, RUNNABLE[lang], "\n".join(body) + "\n", reason))
            lang = None
        elif lang is not None:
            body.append(line)
        previous = line
    return found


def substitutions(postgres_url: str, redis_url: str, folder: Path) -> list[tuple[str, str]]:
    pg = make_url(postgres_url)
    plain = pg.set(drivername="postgresql").render_as_string(hide_password=False)
    host = f"{pg.host}:{pg.port}"
    return [
        ("postgresql://postgres:secret@db:5432/postgres", plain),
        ("jdbc:postgresql://db:5432/postgres", f"jdbc:postgresql://{host}/{pg.database}"),
        ("postgresql://db:5432/postgres", f"postgresql://{host}/{pg.database}"),
        ('.option("user", "postgres").option("password", "secret")',
         f'.option("user", "{pg.username}").option("password", "{pg.password or ""}")'),
        ('.option("orders.user", "postgres").option("orders.password", "secret")',
         f'.option("orders.user", "{pg.username}").option("orders.password", "{pg.password or ""}")'),
        ('{"user": "postgres", "password": "secret"', f'{{"user": "{pg.username}", "password": "{pg.password or ""}"'),
        ("redis://cache:6379/0", redis_url),
        ("/tmp/twopc-quickstart-", f"{folder}/twopc-quickstart-"),
    ]


def block_under(page: Path, heading: str) -> Block:
    """The first runnable block of *page* after the heading line *heading*."""
    lines = page.read_text().splitlines()
    at = lines.index(heading) + 1
    return next(b for b in blocks(page) if b.line > at)
