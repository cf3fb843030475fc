"""The ``twopc`` commands that messages suggest, runnable as pasted: between backticks, each argument shell-quoted,
each ``<placeholder>`` left for the operator (checked by ``tests/unit/test_suggested_commands.py``)."""

from __future__ import annotations

import re
import shlex

__all__ = ["command", "recover_command"]

_PLACEHOLDER = re.compile(r"<[\w-]+>")


def command(*args: str) -> str:
    """``twopc`` *args* between backticks, shell-quoted (a ``<placeholder>`` argument as written)."""
    words = [a if _PLACEHOLDER.search(a) else shlex.quote(a) for a in args]
    return "`" + " ".join(["twopc", *words]) + "`"


def recover_command(checkpoint: str | None, *args: str, format_name: str = "", sink_id: str | None = None) -> str:
    """``twopc recover`` of *checkpoint*'s ledger (``--format`` when known), or with *checkpoint* None,
    of the target the operator names (``--sink-id`` when given); then *args*."""
    if checkpoint is None:
        where = ["--format", format_name or "<format>", "--option", "url=<url>", "--option", "dbtable=<dbtable>"]
        where += ["--sink-id", sink_id] if sink_id else []
    else:
        where = [checkpoint, *(["--format", format_name] if format_name else [])]
    return command("recover", *where, *args)
