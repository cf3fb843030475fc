"""Render the ``twopc`` command's help from its argument parser, so the CLI reference is the code's.

Usage in a MyST page::

    ```{twopc-cli} status
    ```

The argument names a command (none: the top-level help). An unknown command is an error of the
page, which fails the build (`make docs` builds with warnings as errors).
"""
from __future__ import annotations

import argparse
import os
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

WIDTH = "100"


def command_help(command: str | None) -> str:
    """``twopc [command] --help`` as the parser prints it, WIDTH columns wide."""
    from twopc.recovery._cli import _parser  # the parser `twopc` and `python -m twopc.recovery` run

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH  # argparse wraps to $COLUMNS
    try:
        parser = _parser()
        if command:
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            choices = subs[0].choices if subs else {}
            if command not in choices:
                raise ExtensionError(f"twopc-cli: the twopc command has no {command!r} (it has {', '.join(choices)})")
            parser = choices[command]
        return parser.format_help()
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


class CliDirective(SphinxDirective):
    """``{twopc-cli} [command]``: the command's ``--help`` as a literal block."""

    optional_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        text = command_help(self.arguments[0] if self.arguments else None)
        return [nodes.literal_block(text, text)]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("twopc-cli", CliDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
