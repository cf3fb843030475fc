"""The ``twopc`` commands that messages suggest, spelled so that they run as pasted.

A suggested command stands between backticks and starts with ``twopc``; every argument is
quoted for a POSIX shell where it needs it (a checkpoint path with a space), and what only
the operator knows is a ``<placeholder>`` (``<url>``, ``<dbtable>``, ``<format>``) left as
written, for them to replace. A test runs every suggested command through the command
line's parser (``tests/unit/test_suggested_commands.py``).
"""

from __future__ import annotations

import re
import shlex

__all__ = ["command", "recover_command"]

_PLACEHOLDER = re.compile(r"<[\w-]+>")


def command(*args: str) -> str:
    """``twopc`` and *args* as one command between backticks, each argument quoted where a
    shell needs it; an argument holding a ``<placeholder>`` is left as written."""
    words = [a if _PLACEHOLDER.search(a) else shlex.quote(a) for a in args]
    return "`" + " ".join(["twopc", *words]) + "`"


def recover_command(checkpoint: str | None, *args: str, format_name: str = "", sink_id: str | None = None) -> str:
    """``twopc recover`` of the ledger of *checkpoint* (with ``--format`` when *format_name* is
    known), or, for a write without a checkpoint (*checkpoint* None: its ledger is in the
    target), of the target the operator names (``--sink-id`` *sink_id* when given); then *args*."""
    if checkpoint is None:
        where = ["--format", format_name or "<format>", "--option", "url=<url>", "--option", "dbtable=<dbtable>"]
        where += ["--sink-id", sink_id] if sink_id else []
    else:
        where = [checkpoint, *(["--format", format_name] if format_name else [])]
    return command("recover", *where, *args)
