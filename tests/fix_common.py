"""Server-free fixtures every folder uses (a plug-in listed in conftest's ``pytest_plugins``):
``tmp_checkpoint`` (an empty checkpoint folder) and ``prefix`` (a unique key/name prefix)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest


@pytest.fixture
def tmp_checkpoint(tmp_path: Path) -> str:
    """A fresh, empty directory (str) to use as a streaming checkpoint location."""
    path = tmp_path / "checkpoint"
    path.mkdir()
    return str(path)


@pytest.fixture
def prefix() -> str:
    """A unique key prefix."""
    return f"t{uuid.uuid4().hex[:10]}"
