"""The operator command's logging, when ``main`` runs inside a program (a notebook, a test): it writes
to the stderr of the moment, keeps the program's own handlers, and installs itself once."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from twopc.spi.operations import configure_cli_logging


@pytest.fixture
def root() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


def test_records_go_to_the_current_stderr_never_to_a_closed_one(root, monkeypatch) -> None:
    first = io.StringIO()
    monkeypatch.setattr("sys.stderr", first)
    configure_cli_logging()
    first.close()  # as a test's captured stderr is when the test ends
    now = io.StringIO()
    monkeypatch.setattr("sys.stderr", now)
    logging.getLogger("twopc.cli-test").warning("batch 7 is decided")
    assert "batch 7 is decided" in now.getvalue()
    assert "Logging error" not in now.getvalue()


def test_the_programs_handlers_are_kept_and_the_cli_handler_is_installed_once(root, monkeypatch) -> None:
    monkeypatch.setattr("sys.stderr", io.StringIO())
    mine = logging.StreamHandler(io.StringIO())
    root.addHandler(mine)
    configure_cli_logging()
    configure_cli_logging()
    assert mine in root.handlers
    assert [h.get_name() for h in root.handlers].count("twopc-cli-stderr") == 1
