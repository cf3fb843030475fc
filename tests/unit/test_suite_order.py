"""The suite's own scheduling: the costliest files run first (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SLOWEST_FIRST, _cost_rank

TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", SLOWEST_FIRST)
def test_every_costliest_file_exists(name: str) -> None:
    """A renamed or removed file must leave the list too: a stale entry orders nothing."""
    assert (TESTS / name).is_file(), f"tests/conftest.py's SLOWEST_FIRST names {name}, which does not exist"


def test_the_costliest_files_are_collected_first() -> None:
    class Item:  # what the ordering reads of a collected test: its file
        def __init__(self, name: str) -> None:
            self.path = TESTS / name

    names = ["unit/test_version.py", SLOWEST_FIRST[1], "unit/test_xid.py", SLOWEST_FIRST[0], SLOWEST_FIRST[1]]
    items = sorted((Item(n) for n in names), key=_cost_rank)  # type: ignore[arg-type]  # reads .path only
    assert [i.path.relative_to(TESTS).as_posix() for i in items] == [
        SLOWEST_FIRST[0], SLOWEST_FIRST[1], SLOWEST_FIRST[1], "unit/test_version.py", "unit/test_xid.py"]
