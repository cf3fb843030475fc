"""The conformance kit (``twopc.testing``) on the project's own sinks: every contract check
against FileSink, PostgresSink (``twopc-postgres``), MySqlXaSink (MariaDB XA),
``twopc-jdbc`` in staging mode on PostgreSQL, SQLite and MariaDB and in prepared mode on
PostgreSQL and MariaDB, and RedisSink, each on real servers (see ``_kit_harnesses.py`` for
how each is built and the sink-specific verification added to every check).

The protocol's promises (commit twice, lost after rollback, abort idempotent and refused
after commit, list_prepared filtering, envelope, pickling, coordinator and recovery) are
tested here for every sink; a sink's own test files test only what that sink alone does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from twopc.testing import SinkContractTests, SinkHarness

from tests._kit_harnesses import HARNESSES, harness_for


class TestOwnSinksConform(SinkContractTests):
    @pytest.fixture(params=HARNESSES)
    def harness(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SinkHarness]:
        with harness_for(request.param, request, tmp_path) as harness:
            yield harness
