"""Where the repository is, for tests that run its files (``python -m``, the README, ``monitoring/``)
wherever their module sits under tests/."""

from __future__ import annotations

from pathlib import Path

#: the repository's root folder (the one holding pyproject.toml)
REPO_ROOT = Path(__file__).resolve().parents[1]
