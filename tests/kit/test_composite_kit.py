"""The conformance kit's contract checks on the composite sink (``twopc-composite``), on real
servers: a PostgreSQL table, Redis (stream + counter) and the file sink as one sink. Every
check also verifies the participants agree (see ``_composite_helpers``). (A ``twopc-jdbc``
staging participant is refused by a composite: ``test_composite_units.py``.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from twopc.testing import SinkContractTests, SinkHarness

from tests._composite_helpers import composite_harness


class TestCompositeConforms(SinkContractTests):
    @pytest.fixture
    def harness(self, postgres_url: str, redis_url: str, tmp_path: Path) -> Iterator[SinkHarness]:
        with composite_harness(["orders", "events", "files"], postgres_url=postgres_url, redis_url=redis_url,
                               tmp_path=tmp_path) as harness:
            yield harness
