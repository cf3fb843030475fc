"""Every Python and shell block of README.md and docs/*.md runs, or says why it cannot; the
site shows every code line whole.

A block preceded by the line ``<!-- docs-test: skip: <reason> -->`` is skipped here (a block that
needs a cluster, installs packages, or shows a placeholder stream); readers see neither the
marker nor its reason. Every other block runs, in page order, against the suite's servers:

- Python blocks of one page share one namespace (a later block may use an earlier one's names)
  and run in this process on the session's SparkSession (``SparkSession.builder.getOrCreate()``
  returns it). A line ``print(X)  # expected`` checks that ``str(X)`` is ``expected``.
- Shell blocks run with bash (``set -e``); ``twopc`` is ``python -m twopc.recovery``.
- The placeholders the pages show (``db:5432``, ``cache:6379``, user ``postgres``/``secret``,
  ``/tmp/twopc-quickstart-*``, ``http://orders-api:8080``) are replaced by the suite's PostgreSQL,
  Redis, a temporary folder and the reference HTTP service (tests/_http_service.py) before a
  block runs.
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from tests._doc_blocks import PAGES, VISIBLE_MARKER, Block, blocks, skip_markers
from tests._doc_blocks import substitutions as _substitutions
from tests._http_service import HttpService
from tests._paths import REPO_ROOT

ROOT = REPO_ROOT
_EXPECT = re.compile(r"^(\s*)print\((.*)\)\s*#\s*(.+?)\s*$")


def _with_checks(code: str) -> str:
    """``print(X)  # expected`` -> a check that str(X) is expected (and the print)."""
    lines = []
    for line in code.splitlines():
        match = _EXPECT.match(line)
        lines.append(f"{match.group(1)}_docs_expect({match.group(2)}, {match.group(3)!r})" if match else line)
    return "\n".join(lines) + "\n"


def _expect(value: Any, expected: str) -> None:
    print(value)
    assert str(value) == expected, f"the page says this prints {expected}, it printed {value}"


def run_block(block: Block, namespace: dict[str, Any], subs: list[tuple[str, str]], env: dict[str, str]) -> None:
    code = block.code
    for placeholder, real in subs:
        code = code.replace(placeholder, real)
    if block.lang == "python":
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(_with_checks(code), block.where, "exec"), namespace)
        except BaseException as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise AssertionError(f"{block.where}: the example fails: {type(exc).__name__}: {message}\n"
                                 f"output:\n{out.getvalue()}") from exc
        return
    script = f'set -e\ntwopc() {{ "{sys.executable}" -m twopc.recovery "$@"; }}\n{code}'
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, (f"{block.where}: the example exits {done.returncode}\n"
                                  f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}")


def test_every_block_runs_or_says_why() -> None:
    """A block that is not run says why in its marker, every marker stands right before the
    fence of a Python or shell block, and no block shows the reader a test marker."""
    for page in PAGES:
        found = blocks(page)
        for block in found:
            reason = block.skip_reason
            assert reason is None or len(reason) > 5, f"{block.where}: say why the block is not run"
            assert VISIBLE_MARKER not in block.code, (
                f"{block.where}: the block shows readers a test marker; put <!-- docs-test: skip: <reason> --> "
                "on the line before its fence instead")
        fences = {block.line - 1 for block in found}
        for line in skip_markers(page):
            assert line in fences, (f"{page.relative_to(ROOT)}:{line}: a docs-test marker must stand on the line "
                                    "right before the fence of a Python or shell block")


# docs/_static/twopc.css: a rule for furo's code blocks that wraps their lines.
_WRAP_RULE = re.compile(r"div\.highlight pre\s*[,{][^}]*white-space:\s*pre-wrap", re.DOTALL)
_CODE_BLOCK = '<div class="highlight">'


def test_no_code_line_is_cut_off_in_the_built_site(tmp_path: Path) -> None:
    """The site, built as ``make docs`` builds it, wraps a code line wider than the theme's
    column (about 88 characters) instead of hiding its end: every page with a code block
    loads the stylesheet whose rule wraps them."""
    out = tmp_path / "html"
    done = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-b", "html", str(ROOT / "docs"), str(out)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"the site does not build:\n{done.stderr[-3000:]}"
    css = out / "_static" / "twopc.css"
    assert css.exists() and _WRAP_RULE.search(css.read_text()), (
        "docs/_static/twopc.css (html_css_files in docs/conf.py) has no rule that wraps "
        "div.highlight pre (white-space: pre-wrap)")
    with_code = [page for page in sorted(out.rglob("*.html")) if _CODE_BLOCK in page.read_text()]
    assert len(with_code) > 10, f"only {len(with_code)} built pages hold a code block"
    for page in with_code:
        href = Path(os.path.relpath(css, page.parent)).as_posix()
        assert f'href="{href}' in page.read_text(), f"{page.relative_to(out)} does not load {href}"


RUN_PAGES = [p for p in PAGES if any(b.skip_reason is None for b in blocks(p))]


@pytest.mark.parametrize("page", RUN_PAGES, ids=[str(p.relative_to(ROOT)) for p in RUN_PAGES])
def test_page_examples(page: Path, spark: Any, postgres_url: str, redis_url: str, tmp_path: Path) -> None:
    """Every runnable block of *page* runs, in order, against the suite's servers."""
    subs = _substitutions(postgres_url, redis_url, tmp_path)
    env = dict(os.environ, PGPASSWORD=make_url(postgres_url).password or "")
    namespace: dict[str, Any] = {"__name__": "__docs_example__", "_docs_expect": _expect}
    with HttpService() as service:  # the HTTP API of the twopc-http page, http://orders-api:8080
        subs.append(("http://orders-api:8080", service.url))
        for block in blocks(page):
            if block.skip_reason is None:
                run_block(block, namespace, subs, env)
    if service.log:  # every request the service saw carried a key, and none was applied twice
        assert all(s.key for s in service.log) and max(service.applied.values()) == 1, service.applied
