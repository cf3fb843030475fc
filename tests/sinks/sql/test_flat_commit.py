"""The driver's commit of a batch costs a number of round trips that does not grow with its
partition count, and keeps every transaction's outcome exact.

Round trips are counted structurally, by :class:`twopc.faultinject.FaultProxy` between the sink and
the real server (``ProxyConnection.round_trips``: how many times the client spoke after the
server answered); no duration is measured. An error inside the pipeline (an id already
committed, an id rolled back by hand) is attributed to that id alone: ``ALREADY_COMMITTED``
when its marker row exists, ``LOST`` when not, and the ids after it are committed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from twopc import CommitCoordinator, CommitLedger, CommitOutcome
from twopc.faultinject import FaultProxy
from twopc.sinks import MySqlXaSink, PostgresSink

from tests._sql_helpers import batch, ctx, fresh_sql_target, prepare, validated

SINKS = [pytest.param(("postgres_url", PostgresSink), id="postgres"),
         pytest.param(("mariadb_url", MySqlXaSink), id="mariadb")]


@pytest.fixture
def target(request: pytest.FixtureRequest) -> Iterator[tuple[str, type[Any], str, str]]:
    """(url, sink class, fresh table, fresh sink id); leftovers are rolled back."""
    with fresh_sql_target(request) as target:
        yield target


def _ids(url: str, table: str) -> list[int]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as c:
            return [r[0] for r in c.exec_driver_sql(f"SELECT id FROM {table} ORDER BY id")]
    finally:
        engine.dispose()


def _prepared_batch(sink: Any, sink_id: str, partitions: int, batch_id: int = 1) -> list[Any]:
    return [prepare(sink, ctx(sink_id, batch_id, p), batch([batch_id * 1000 + p])) for p in range(partitions)]


@pytest.mark.parametrize("target", SINKS, indirect=True)
def test_an_error_inside_the_batch_commit_is_attributed_to_its_own_transaction(
        target: tuple[str, type[Any], str, str]) -> None:
    """Five handles; the second was committed before, the fourth rolled back by hand: the
    batch commit answers each exactly, and the ones after each failing id are committed."""
    url, sink_class, table, sink_id = target
    sink = validated(sink_class, url, table)
    handles = _prepared_batch(sink, sink_id, 5)
    assert sink.commit(handles[1]) is CommitOutcome.COMMITTED
    sink.abort(handles[3])
    outcomes = sink.commit_all(handles)
    assert outcomes == [CommitOutcome.COMMITTED, CommitOutcome.ALREADY_COMMITTED, CommitOutcome.COMMITTED,
                        CommitOutcome.LOST, CommitOutcome.COMMITTED]
    assert _ids(url, table) == [1000, 1001, 1002, 1004]
    assert sink.list_prepared(sink_id) == []
    again = sink.commit_all(handles, recovering=True)  # a replayed commit: nothing is prepared any more
    assert again == [CommitOutcome.ALREADY_COMMITTED] * 3 + [CommitOutcome.LOST, CommitOutcome.ALREADY_COMMITTED]
    sink.close()


@contextlib.contextmanager
def _proxied(url: str, sink_class: type[Any], table: str, sink_id: str,
             tmp_path: Path) -> Iterator[tuple[FaultProxy, Any, CommitCoordinator]]:
    """A validated sink talking to the server through a proxy, and its coordinator."""
    u = sa.make_url(url)
    with FaultProxy(u.host or "127.0.0.1", u.port or 0) as proxy:
        proxied = sa.make_url(url).set(host=proxy.listen_host, port=proxy.port).render_as_string(hide_password=False)
        sink = validated(sink_class, proxied, table)
        yield proxy, sink, CommitCoordinator(sink, CommitLedger(str(tmp_path / "ck")), sink_id)


def _round_trips(proxy: FaultProxy) -> int:
    return sum(c.round_trips for c in proxy.connections())


@pytest.mark.parametrize("target", SINKS[:1], indirect=True)
def test_the_driver_commit_of_a_batch_has_as_many_round_trips_at_24_partitions_as_at_2(
        target: tuple[str, type[Any], str, str], tmp_path: Path) -> None:
    """Through a counting proxy: the coordinator's commit of a 24-partition batch (decision,
    first commit, the rest in one pipeline, mark, orphan sweep) talks to the server as often
    as that of a 2-partition batch; committing one by one would add 22 round trips. A
    60-partition batch is spread over 3 pipelines on pooled connections (PostgreSQL merges
    the WAL flushes of commits that overlap): one round trip each, plus the pool's ping."""
    url, sink_class, table, sink_id = target
    with _proxied(url, sink_class, table, sink_id, tmp_path) as (proxy, sink, coordinator):
        costs = {}
        for batch_id, partitions in ((1, 2), (2, 24), (3, 60), (4, 60)):
            handles = _prepared_batch(sink, sink_id, partitions, batch_id)
            before = _round_trips(proxy)
            result = coordinator.commit_batch(batch_id, handles)
            costs[partitions] = _round_trips(proxy) - before  # batch 4: the pool's connections exist
            assert result.committed == partitions
        # A replay finding every id committed: the recovery path stays flat as well.
        handles = [sink.parse_gid(h.txn_id) for h in _prepared_batch(sink, sink_id, 24, 5)]
        for h in handles:
            sink.commit(h)
        before = _round_trips(proxy)
        assert sink.commit_all(handles, recovering=True) == [CommitOutcome.ALREADY_COMMITTED] * 24
        costs[-24] = _round_trips(proxy) - before
        sink.close()
    assert costs[24] <= costs[2] + 1 and costs[-24] <= 3, costs
    assert costs[60] <= costs[2] + 2 * 2 + 2, costs  # 2 more pipelines, each a ping and a round trip
    assert len(_ids(url, table)) == 2 + 24 + 60 + 60 + 24


@pytest.mark.parametrize("target", SINKS[:1], indirect=True)
def test_a_batch_spread_over_every_pipeline_reuses_the_connections_of_the_last_one(
        target: tuple[str, type[Any], str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch committed over all MAX_PIPELINES pipelines at once, then another: the second
    opens no connection to the server (the driver's pool keeps as many as one batch uses; it
    kept 4 and reconnected the others for every batch of 100+ partitions)."""
    import twopc.sinks.postgres._commit_pipeline as pipeline

    monkeypatch.setattr(pipeline, "PER_PIPELINE", 2)  # 8 pipelines from 16 partitions
    url, sink_class, table, sink_id = target
    with _proxied(url, sink_class, table, sink_id, tmp_path) as (proxy, sink, coordinator):
        opened = []
        for batch_id in (1, 2):
            handles = _prepared_batch(sink, sink_id, 2 * pipeline.MAX_PIPELINES, batch_id)
            before = proxy.accepted
            proxy.add_latency(0.1, "downstream")  # the pipelines overlap, as at 200 partitions
            try:
                assert coordinator.commit_batch(batch_id, handles).committed == len(handles)
            finally:
                proxy.heal()
            opened.append(proxy.accepted - before)
        sink.close()
    assert opened[0] > 0, opened  # the first batch did spread over pooled connections
    assert opened[1] == 0, opened
    assert len(_ids(url, table)) == 4 * pipeline.MAX_PIPELINES
