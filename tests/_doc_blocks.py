"""The fenced code blocks of README.md and docs/*.md, and the placeholders they show.

Shared by the test that runs every block (``tests/spark/test_docs_examples.py``) and the one
that runs the README's batch quickstart through an installed wheel
(``tests/spark/test_installed_package.py``).
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
NOT_RUN = "# not run by the docs tests:"
RUNNABLE = {"python": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int
    lang: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def skip_reason(self) -> str | None:
        first = self.code.lstrip().splitlines()[0] if self.code.strip() else ""
        return first[len(NOT_RUN):].strip() if first.startswith(NOT_RUN) else None


def blocks(page: Path) -> list[Block]:
    """The Python and shell blocks of *page*, in order."""
    found: list[Block] = []
    lang: str | None = None
    start = 0
    body: list[str] = []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        match = _FENCE.match(line)
        if lang is None and match:
            lang, start, body = match.group(1), number, []
        elif lang is not None and line.startswith("```"):
            if lang in RUNNABLE:
                found.append(Block(page, start, RUNNABLE[lang], "\n".join(body) + "\n"))
            lang = None
        elif lang is not None:
            body.append(line)
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
