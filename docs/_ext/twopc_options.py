"""Render twopc's option tables from the code, and fail the build when one is undocumented.

Usage in a MyST page::

    ```{twopc-options} redis
    url: the Redis server, ``redis://`` or ``rediss://``.
    mapping: the JSON list of ops ...
    ```

The argument names a table that the code declares (``TABLES`` below). Every option in the
table needs a ``name: text`` line (continuation lines are indented); an option the code has and
the page does not, or a line for an option the code does not have, is an error of the page
(`make docs` builds with warnings as errors, so it fails the build). A table of
refused options renders the code's own reasons.
"""
from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

#: table id -> where the code declares it ("module:attribute").
TABLES: dict[str, str] = {
    "runtime": "twopc.spi.runtime:RUNTIME_OPTION_NAMES",
    "spark-passed": "twopc.sinks._options:SPARK_PASSED_NAMES",
    "jdbc-spark": "twopc.sinks.sql.options._jdbc_options:SPARK_OPTIONS",
    "jdbc-twopc": "twopc.sinks.sql.options._jdbc_options:TWOPC_OPTIONS",
    "jdbc-refused": "twopc.sinks.sql.options._jdbc_options:REJECTED_OPTIONS",
    "redis": "twopc.sinks.redis._sink:OPTIONS",
    "redis-stream": "twopc.sinks.redis_source._read_options:OPTIONS",
    "http": "twopc.sinks.http._options:OPTIONS",
}


def load_table(table: str) -> Any:
    """The option table *table* as the code declares it."""
    module, _, attr = TABLES[table].partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ExtensionError(f"twopc-options: cannot import option table {table!r} from {TABLES[table]}: {exc}; "
                             f"update TABLES in docs/_ext/twopc_options.py where the table moved") from exc


def parse_texts(lines: Sequence[str]) -> dict[str, str]:
    """``name: text`` lines (indented lines continue the text) -> {name: text}."""
    texts: dict[str, str] = {}
    name = None
    for line in lines:
        if not line.strip():
            continue
        if line[0].isspace() and name is not None:
            texts[name] += " " + line.strip()
            continue
        name, sep, text = line.partition(":")
        if not sep:
            raise ExtensionError(f"twopc-options: expected 'name: text', got {line!r}")
        name = name.strip().strip("`")
        texts[name] = text.strip()
    return texts


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


class OptionsDirective(SphinxDirective):
    """``twopc-options <table>``: the table's options with the page's text for each."""

    required_arguments = 1
    has_content = True

    def run(self) -> list[nodes.Node]:
        table = self.arguments[0]
        if table not in TABLES:
            raise self.error(f"twopc-options: unknown table {table!r}; known: {', '.join(sorted(TABLES))}")
        declared = load_table(table)
        where = f"{self.env.docname}.md, table {table!r}"
        if isinstance(declared, dict):  # refused options: the code carries the reason
            rows = [f"| `{name}` | refused: {_cell(reason)} |" for name, reason in sorted(declared.values())]
        else:
            texts = parse_texts(list(self.content))
            missing = [n for n in declared if not texts.get(n)]
            if missing:
                raise self.error(
                    f"{where}: option(s) {', '.join(missing)} exist in the code ({TABLES[table][-1]}) but have no "
                    f"documentation text: add a line 'name: what it does' for each to the directive")
            unknown = [n for n in texts if n not in declared]
            if unknown:
                raise self.error(
                    f"{where}: option(s) {', '.join(unknown)} are documented but the code does not declare them "
                    f"({TABLES[table][-1]}): remove them or declare them")
            rows = [f"| `{name}` | {_cell(texts[name])} |" for name in declared]
        body = StringList(["| option | meaning |", "|---|---|", *rows], source=where)
        container = nodes.container()
        self.state.nested_parse(body, self.content_offset, container)
        return container.children


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("twopc-options", OptionsDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
