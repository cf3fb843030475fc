"""The Redis Stream source without Spark, against a real Redis: entry ids, offsets and
ranges, the options, the ``twopc_stream_v2`` library (plan, ack), and the reader's
planning, reading and acknowledgement called the way Spark calls them."""

from __future__ import annotations

import hashlib
import itertools
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType, TimestampType

from twopc import ConfigurationError
from twopc.sinks._redis.stream_lua import LIBRARY_NAME, library_code
from twopc.sinks.redis_source import (
    BASE_DDL,
    EntryId,
    Offset,
    Position,
    RedisStreamReader,
    StreamOptions,
    StreamServer,
    schema_ddl,
)
from twopc.spi import MissingOptionError, SourceError

from tests._stream_helpers import rows_of

U64 = st.integers(0, 2**64 - 1)
SCHEMA = StructType([StructField("stream", StringType()), StructField("id", StringType()),
                     StructField("timestamp", TimestampType()),
                     StructField("fields", MapType(StringType(), StringType())), StructField("n", LongType())])


def options(redis_url: str, streams: str, **extra: str) -> StreamOptions:
    return StreamOptions.read({"url": redis_url, "streams": streams, "group": "g", **extra})


def fill(r: Any, key: str, n: int, start: int = 1) -> list[bytes]:
    return [r.xadd(key, {"n": str(i)}, id=f"1000-{i}") for i in range(start, start + n)]


# -- ids and offsets ------------------------------------------------------------------------------
@given(U64, U64)
def test_next_and_previous_are_the_neighbours_in_redis_order(ms: int, seq: int) -> None:
    e = EntryId(ms, seq)
    assert EntryId.parse(str(e)) == e
    if (ms, seq) != (2**64 - 1, 2**64 - 1):
        assert e < e.next() and e.next().previous() == e
    if (ms, seq) != (0, 0):
        assert e.previous() < e and e.previous().next() == e


def test_entry_ids_order_numerically_not_as_text() -> None:
    assert EntryId.parse("9-0") < EntryId.parse("10-0") < EntryId.parse("10-1") < EntryId.parse("10-10")
    assert EntryId.parse("5") == EntryId(5, 0)
    for bad in ("", "x-1", "1-", "-1", "1-2-3", str(2**64)):
        with pytest.raises(ConfigurationError, match="entry id"):
            EntryId.parse(bad)


def test_offsets_round_trip_and_give_the_ranges_between_them() -> None:
    a = Offset({"s1": Position(EntryId(5, 0), 3)})
    b = Offset({"s1": Position(EntryId(9, 1), 10), "s2": Position(EntryId(7, 0), 2), "s3": Position(EntryId(0, 0))})
    assert Offset.from_json(b.to_json()) == b
    ranges = a.ranges(b)
    assert [(x.stream, str(x.lo), str(x.hi), x.count) for x in ranges] == [
        ("s1", "5-0", "9-1", 7), ("s2", "0-0", "7-0", 2)]
    assert a.ranges(a) == []
    with pytest.raises(ConfigurationError, match="backwards"):
        b.ranges(a)
    counted = Offset({"s1": Position(EntryId(9, 1), 10, 14)})  # the stream's entry count at the position
    assert counted.to_json()["streams"]["s1"] == {"id": "9-1", "n": 10, "a": 14}
    assert Offset.from_json(counted.to_json()).streams["s1"].added == 14 and b.streams["s1"].added is None
    # a stream recreated with smaller ids (failOnDataLoss=false): the range starts over at 0-0
    assert [(str(x.lo), str(x.hi), x.count) for x in b.ranges(Offset({"s1": Position(EntryId(2, 0), 12)}))] == [
        ("0-0", "2-0", 2)]
    with pytest.raises(ConfigurationError, match="backwards"):
        b.ranges(Offset({"s1": Position(EntryId(2, 0), 10)}))
    bad: Any
    for bad in ({"v": 2, "streams": {}}, {"streams": {}}, {"v": 1, "streams": {"s": "1-0"}}, '{"v": 1}'):
        with pytest.raises(ConfigurationError, match="not a twopc-redis-stream offset"):
            Offset.from_json(bad)


# -- options --------------------------------------------------------------------------------------
def test_options_refuse_unknown_ones_and_need_url_streams_group(redis_url: str) -> None:
    with pytest.raises(ConfigurationError, match=r"does not know option.s. maxOffsetsPerTrigger "
                                                 r".maxOffsetsPerTrigger: did you mean 'maxEntriesPerTrigger'"):
        options(redis_url, "s", maxOffsetsPerTrigger="5")
    with pytest.raises(MissingOptionError, match='"group"'):
        StreamOptions.read({"url": redis_url, "streams": "s"})
    with pytest.raises(ConfigurationError, match="either a list of keys or one glob"):
        options(redis_url, "a,b*")
    with pytest.raises(ConfigurationError, match="startingPosition"):
        options(redis_url, "s", startingPosition="yesterday")
    with pytest.raises(ConfigurationError, match="no option consumer: it never reads with XREADGROUP"):
        options(redis_url, "s", consumer="worker-1")
    o = options(redis_url, "a, b", startingPosition="12-3", maxEntriesPerTrigger="5", checkpointLocation="/x")
    assert o.streams == ("a", "b") and o.starting == EntryId(12, 3) and o.max_per_trigger == 5
    assert options(redis_url, "orders:*").pattern == "orders:*"


def test_option_errors_never_show_the_password() -> None:
    with pytest.raises(ConfigurationError) as err:
        StreamOptions.read({"url": "redis://u:s3cr3tpw@127.0.0.1:1/0", "streams": "s", "group": "g",
                            "startingPosition": "s3cr3tpw"})
    assert "s3cr3tpw" not in str(err.value)


def test_schema_is_the_base_columns_plus_the_typed_fields() -> None:
    assert schema_ddl("") == BASE_DDL
    assert schema_ddl("n BIGINT") == BASE_DDL + ", n BIGINT"


# -- the library ----------------------------------------------------------------------------------
def test_library_code_is_pinned() -> None:
    """A change of the loaded code needs a new library name (twopc_stream_v2)."""
    assert hashlib.sha256(library_code().encode()).hexdigest()[:16] == PINNED


PINNED = "aa84984debbde697"


def test_plan_counts_limits_and_splits_without_shipping_fields(redis_url: str, r: Any, prefix: str) -> None:
    key = f"{prefix}:s"
    fill(r, key, 25)
    server = StreamServer(options(redis_url, key).client)
    p = server.plan(key, EntryId(1000, 3), None, split=10)
    assert (str(p.last), p.count, [str(b) for b in p.bounds]) == ("1000-25", 22, ["1000-13", "1000-23"])
    p = server.plan(key, EntryId(0), EntryId(1000, 7), limit=5)
    assert (str(p.last), p.count) == ("1000-5", 5)
    assert server.plan(key, EntryId(1000, 25), None).last is None
    assert server.plan(f"{prefix}:missing", EntryId(0), None).count == 0


def test_ack_moves_the_group_forward_only_acks_other_consumers_and_trims_exactly(
        redis_url: str, r: Any, prefix: str) -> None:
    key = f"{prefix}:s"
    fill(r, key, 10)
    server = StreamServer(options(redis_url, key).client)
    assert server.ack(key, "g", EntryId(1000, 4), trim=False) == (0, 0, True)  # group missing: created
    r.xreadgroup("g", "other", {key: ">"}, count=3)  # 1000-5..7 pending for another consumer
    assert server.ack(key, "g", EntryId(1000, 6), trim=False) == (2, 0, False)
    group = r.xinfo_groups(key)[0]
    assert group["last-delivered-id"] == b"1000-7" and group["pending"] == 1  # never moved back
    assert server.ack(key, "g", EntryId(1000, 8), trim=True) == (1, 8, False)
    assert [e for e, _ in r.xrange(key)] == [b"1000-9", b"1000-10"]
    assert r.xinfo_groups(key)[0]["last-delivered-id"] == b"1000-8"
    r.delete(key)
    assert server.ack(key, "g", EntryId(1000, 9), trim=False) is None  # the stream is gone: the reader decides


def _xrange_calls(r: Any) -> int:
    return int(r.info("commandstats").get("cmdstat_xrange", {}).get("calls", 0))


def test_ack_does_not_walk_the_backlog_and_its_lag_is_exact_near_the_end(redis_url: str, r: Any, prefix: str) -> None:
    """The acknowledgement's cost must not grow with the entries behind it (it runs per commit,
    blocking Redis): with 5000 entries after the acknowledged id it reads at most 1001 of them
    (one XRANGE) and the lag shows as unknown; within 1000 of the end it sets an exact
    entries-read (deleted entries included)."""
    key = f"{prefix}:s"
    r.xadd(key, {"n": "0"}, id="1000-0")
    pipe = r.pipeline(transaction=False)
    for i in range(1, 5001):
        pipe.xadd(key, {"n": str(i)}, id=f"1000-{i}")
    pipe.execute()
    server = StreamServer(options(redis_url, key).client)
    server.ack(key, "g", EntryId(1000, 0), trim=False)  # loads the library, creates the group
    before = _xrange_calls(r)
    server.ack(key, "g", EntryId(1000, 1), trim=False)
    assert _xrange_calls(r) - before == 1
    assert r.xinfo_groups(key)[0]["lag"] is None  # not counted: Redis shows the lag as unknown
    r.xdel(key, "1000-2")  # a deletion: Redis can no longer work the lag out by itself
    server.ack(key, "g", EntryId(1000, 4000), trim=False)
    assert r.xinfo_groups(key)[0]["lag"] == 1000
    assert server.ack(key, "g", EntryId(1000, 5000), trim=False)
    assert r.xinfo_groups(key)[0]["lag"] == 0


def test_the_library_is_loaded_again_when_the_server_lost_it(redis_url: str, r: Any, prefix: str) -> None:
    key = f"{prefix}:s"
    fill(r, key, 3)
    server = StreamServer(options(redis_url, key).client)
    assert server.plan(key, EntryId(0), None).count == 3
    r.function_delete(LIBRARY_NAME)
    assert server.plan(key, EntryId(0), None).count == 3


# -- the reader, called like Spark calls it ---------------------------------------------------------
def reader(redis_url: str, streams: str, **extra: str) -> RedisStreamReader:
    return RedisStreamReader(options(redis_url, streams, **extra), SCHEMA)


def first_batch(redis_url: str, r: Any, key: str, n: int) -> tuple[RedisStreamReader, dict[str, Any], dict[str, Any]]:
    """*n* entries in *key*; a reader from the earliest, and its first batch's (start, end)."""
    fill(r, key, n)
    rd = reader(redis_url, key, startingPosition="earliest")
    start = rd.initialOffset()
    return rd, start, rd.latestOffset(start, ReadAllAvailable())


def read_all(rd: RedisStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[Any, ...]]:
    return rows_of(itertools.chain.from_iterable(rd.read(p) for p in rd.partitions(start, end)))


def test_batches_cover_every_entry_once_within_the_limit_and_replays_are_identical(
        redis_url: str, r: Any, prefix: str) -> None:
    a, b = f"{prefix}:a", f"{prefix}:b"
    fill(r, a, 30)
    fill(r, b, 5)
    rd = reader(redis_url, f"{a},{b}", maxEntriesPerTrigger="12", maxEntriesPerPartition="4",
                startingPosition="earliest")
    start = rd.initialOffset()
    got: list[tuple[Any, ...]] = []
    for batch in itertools.count():
        end = rd.latestOffset(start, rd.getDefaultReadLimit())
        if end == start:
            break
        rows = read_all(rd, start, end)
        assert 0 < len(rows) <= 12
        assert all(len(p.range.stream) and p.range.count <= 4 for p in rd.partitions(start, end))
        late = r.xadd(a, {"n": "0"}) if batch < 2 else b""  # appended after the range was recorded
        r.xreadgroup("g", "someone-else", {a: ">"}, count=2)  # what Redis delivers to others changes nothing
        assert read_all(rd, start, end) == rows  # the replay of the recorded range
        assert late.decode() not in {row[1] for row in rows}
        got += rows
        rd.commit(end)
        start = end
    want = [(a, e.decode()) for e, _ in r.xrange(a)] + [(b, f"1000-{i}") for i in range(1, 6)]
    assert sorted((s, i) for s, i, *_ in got) == sorted(want) and len(want) > 35
    assert {row[4] for row in got if row[0] == b} == {1, 2, 3, 4, 5}  # fieldsSchema n BIGINT
    for key in (a, b):
        group = r.xinfo_groups(key)[0]
        assert group["pending"] == 0 and group["lag"] == 0


def test_all_available_ignores_the_limit_and_available_now_stops_at_its_start(
        redis_url: str, r: Any, prefix: str) -> None:
    a = f"{prefix}:a"
    fill(r, a, 10)
    rd = reader(redis_url, a, maxEntriesPerTrigger="3", startingPosition="earliest")
    start = rd.initialOffset()
    assert Offset.from_json(rd.latestOffset(start, ReadAllAvailable())).streams[a] == Position(EntryId(1000, 10), 10)
    rd.prepareForTriggerAvailableNow()
    fill(r, a, 5, start=11)
    end = rd.latestOffset(start, ReadMaxRows(100))
    assert Offset.from_json(end).streams[a].id == EntryId(1000, 10)


def test_the_group_is_acknowledged_only_by_commit_or_the_next_plan(redis_url: str, r: Any, prefix: str) -> None:
    a = f"{prefix}:a"
    rd, start, end = first_batch(redis_url, r, a, 6)
    read_all(rd, start, end)
    assert r.xinfo_groups(a)[0]["last-delivered-id"] == b"0-0"  # read, not committed: still lag
    fresh = reader(redis_url, a, startingPosition="earliest")  # a restart: commit(end) never ran
    fresh.latestOffset(end, ReadAllAvailable())  # Spark plans the next batch only once `end` is committed
    assert r.xinfo_groups(a)[0]["last-delivered-id"] == b"1000-6"


def test_starting_positions(redis_url: str, r: Any, prefix: str) -> None:
    a = f"{prefix}:a"
    fill(r, a, 6)
    assert Offset.from_json(reader(redis_url, a, startingPosition="latest").initialOffset()).streams[a].id == \
        EntryId(1000, 6)
    assert Offset.from_json(reader(redis_url, a, startingPosition="1000-2").initialOffset()).streams[a].id == \
        EntryId(1000, 2)
    r.xgroup_create(a, "g2", id="1000-4")
    r.xreadgroup("g2", "c", {a: ">"}, count=1)  # 1000-5 pending: "group" starts before it
    o = StreamOptions.read({"url": redis_url, "streams": a, "group": "g2"})
    assert Offset.from_json(RedisStreamReader(o, SCHEMA).initialOffset()).streams[a].id == EntryId(1000, 4)
    b = f"{prefix}:new"
    assert Offset.from_json(reader(redis_url, b, createStreams="true").initialOffset()).streams[b].id == EntryId(0)
    assert r.xinfo_groups(b)[0]["name"] == b"g"  # group (and empty stream) created


def test_a_pattern_finds_streams_that_appear_later(redis_url: str, r: Any, prefix: str) -> None:
    fill(r, f"{prefix}:p1", 2)
    rd = reader(redis_url, f"{prefix}:p*", startingPosition="earliest")
    start = rd.initialOffset()
    fill(r, f"{prefix}:p2", 3)
    end = rd.latestOffset(start, ReadAllAvailable())
    assert {row[0] for row in read_all(rd, start, end)} == {f"{prefix}:p1", f"{prefix}:p2"}


def test_the_batch_latest_offset_planned_is_split_without_walking_the_stream_again(
        redis_url: str, r: Any, prefix: str) -> None:
    """``partitions`` of the range ``latestOffset`` just planned takes its pieces from that
    walk (the plan's server-side walk is the driver's largest Redis cost per micro-batch); the
    same range asked again, as after a restart, is walked again and gets the same pieces."""
    a = f"{prefix}:a"
    fill(r, a, 25)
    rd = reader(redis_url, a, startingPosition="earliest", maxEntriesPerPartition="10")
    start = rd.initialOffset()
    end = rd.latestOffset(start, ReadAllAvailable())

    def walks() -> int:
        return int(r.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0))

    before = walks()
    parts = rd.partitions(start, end)
    assert walks() == before
    assert [p.range.count for p in parts] == [10, 10, 5]
    assert rd.partitions(start, end) == parts and walks() == before + 1
    assert [row[1] for row in read_all(rd, start, end)] == [f"1000-{i}" for i in range(1, 26)]


def test_deleted_entries_of_a_recorded_range_fail_clearly_or_are_skipped_when_allowed(
        redis_url: str, r: Any, prefix: str) -> None:
    a = f"{prefix}:a"
    rd, start, end = first_batch(redis_url, r, a, 8)
    parts = rd.partitions(start, end)
    r.xtrim(a, minid="1000-3", approximate=False)  # a producer's MAXLEN/MINID trims unread entries
    with pytest.raises(SourceError, match=r"held 8 entries .* now holds 6: entries were deleted"):
        list(rd.read(parts[0]))
    with pytest.raises(SourceError, match="failOnDataLoss=false"):
        rd.partitions(start, end)
    lenient = reader(redis_url, a, startingPosition="earliest", failOnDataLoss="false")
    assert len(read_all(lenient, start, end)) == 6


def test_a_stream_deleted_or_recreated_while_running_fails_clearly(redis_url: str, r: Any, prefix: str) -> None:
    a = f"{prefix}:a"
    rd, start, end = first_batch(redis_url, r, a, 4)
    parts = rd.partitions(start, end)
    rd.commit(end)
    r.delete(a)
    with pytest.raises(SourceError, match="was deleted"):
        rd.latestOffset(end, ReadAllAvailable())
    with pytest.raises(SourceError, match="the stream was deleted"):
        list(rd.read(parts[0]))
    fill(r, a, 2)  # recreated with ids before the query's position
    with pytest.raises(SourceError, match=r"was deleted and recreated \(its last id 1000-2 is before"):
        rd.latestOffset(end, ReadAllAvailable())
    for replay in (lambda: rd.partitions(start, end), lambda: list(rd.read(parts[0]))):
        with pytest.raises(SourceError, match="deleted and recreated"):
            replay()


def test_an_unparsable_typed_field_names_the_entry(redis_url: str, r: Any, prefix: str) -> None:
    a = f"{prefix}:a"
    r.xadd(a, {"n": "seven"}, id="1000-1")
    rd = reader(redis_url, a, startingPosition="earliest")
    start = rd.initialOffset()
    end = rd.latestOffset(start, ReadAllAvailable())
    with pytest.raises(SourceError, match=r"entry 1000-1 .* field 'n' = 'seven' is not a long"):
        read_all(rd, start, end)


# -- entries removed before the query read them (failOnDataLoss) -------------------------------------
def committed_batch(rd: RedisStreamReader, start: dict[str, Any], limit: Any = None) -> dict[str, Any]:
    """Plan, read and commit one micro-batch from *start*, as Spark does; its end."""
    end = rd.latestOffset(start, limit or rd.getDefaultReadLimit())
    read_all(rd, start, end)
    rd.commit(end)
    return end


def test_entries_trimmed_or_deleted_before_the_query_read_them_fail_naming_the_gap(
        redis_url: str, r: Any, prefix: str) -> None:
    a = f"{prefix}:a"
    fill(r, a, 12)
    r.xtrim(a, minid="1000-3", approximate=False)  # before the query started: not the query's loss
    r.xdel(a, "1000-5")
    rd = reader(redis_url, a, startingPosition="earliest", maxEntriesPerTrigger="3")
    end = committed_batch(rd, rd.initialOffset())
    assert Offset.from_json(end).streams[a].id == EntryId(1000, 6)
    r.xdel(a, "1000-4")  # already read: not a loss
    end = committed_batch(rd, end)  # 1000-7 .. 1000-9
    r.xtrim(a, minid="1000-12", approximate=False)  # 1000-10 and 1000-11 were never read
    with pytest.raises(SourceError, match=rf"stream '{a}' .*: 2 entries the query had not read were trimmed or "
                                          r"deleted .*; the query has read up to 1000-9, the stream now holds 1 entry "
                                          r"from 1000-12 \(12 added in all\). To go on .* failOnDataLoss=false"):
        rd.latestOffset(end, rd.getDefaultReadLimit())
    # an entry deleted (XDEL) behind the query's position, the whole rest read in one batch
    b = f"{prefix}:b"
    fill(r, b, 6)
    rd = reader(redis_url, b, startingPosition="earliest")
    end = committed_batch(rd, rd.initialOffset(), ReadMaxRows(2))
    r.xdel(b, "1000-4")
    with pytest.raises(SourceError, match=rf"stream '{b}' .*: 1 entry the query had not read was trimmed or deleted "
                                          r".*; the query has read up to 1000-2,"):
        rd.latestOffset(end, ReadAllAvailable())


def test_with_fail_on_data_loss_false_a_trim_is_one_warning_and_the_rest_is_read(
        redis_url: str, r: Any, prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    a = f"{prefix}:a"
    fill(r, a, 10)
    rd = reader(redis_url, a, startingPosition="earliest", maxEntriesPerTrigger="3", failOnDataLoss="false")
    end = committed_batch(rd, rd.initialOffset())
    r.xtrim(a, minid="1000-6", approximate=False)  # 1000-4 and 1000-5 lost
    caplog.set_level("WARNING", logger="twopc")
    got: list[str] = []
    while (nxt := rd.latestOffset(end, rd.getDefaultReadLimit())) != end:
        got += [row[1] for row in read_all(rd, end, nxt)]
        rd.commit(nxt)
        end = nxt
    assert got == [f"1000-{i}" for i in range(6, 11)]
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelname == "WARNING"]
    assert len(warnings) == 1 and f"stream '{a}'" in warnings[0], warnings
    assert "2 entries the query had not read were trimmed" in warnings[0] and "read up to 1000-3" in warnings[0]


def test_a_stream_deleted_between_runs_with_fail_on_data_loss_false_warns_and_reads_the_new_entries(
        redis_url: str, r: Any, prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    a = f"{prefix}:a"
    rd, start, end = first_batch(redis_url, r, a, 4)
    read_all(rd, start, end)  # the batch committed in Spark's log; its acknowledgement never ran
    r.delete(a)
    caplog.set_level("WARNING", logger="twopc")
    lenient = reader(redis_url, a, startingPosition="earliest", failOnDataLoss="false")  # the next run
    assert lenient.latestOffset(end, ReadAllAvailable()) == end
    assert any(f"stream '{a}'" in m and "was deleted" in m for m in caplog.messages), caplog.messages
    r.xadd(a, {"n": "5"}, id="2000-1")  # recreated, ids after the query's position
    nxt = lenient.latestOffset(end, ReadAllAvailable())
    assert [row[1] for row in read_all(lenient, end, nxt)] == ["2000-1"]
    lenient.commit(nxt)
    r.delete(a)
    r.xadd(a, {"n": "6"}, id="1000-1")  # recreated again, ids before the query's position
    after = lenient.latestOffset(nxt, ReadAllAvailable())
    assert [row[1] for row in read_all(lenient, nxt, after)] == ["1000-1"]
    lenient.commit(after)
    assert r.xinfo_groups(a)[0]["last-delivered-id"] == b"1000-1"
    assert any("was deleted and recreated" in m for m in caplog.messages), caplog.messages


def test_a_missing_stream_is_refused_at_start_unless_create_streams_is_set(
        redis_url: str, r: Any, prefix: str) -> None:
    a, typo = f"{prefix}:orders", f"{prefix}:ordrs"
    fill(r, a, 2)
    with pytest.raises(ConfigurationError, match=rf"streams: no stream '{typo}' on .*createStreams=true"):
        reader(redis_url, f"{a},{typo}").initialOffset()
    assert r.xinfo_groups(a) == [] and not r.exists(typo)  # refused before anything was created
    rd = reader(redis_url, f"{a},{typo}", createStreams="true")
    assert Offset.from_json(rd.initialOffset()).streams[typo].id == EntryId(0)
    assert r.xinfo_groups(typo)[0]["name"] == b"g"  # the group (and the empty stream) created


@pytest.mark.parametrize("starting", ["earliest", "latest", "1000-7", "group"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_reported_loss_is_exactly_the_unread_entries_removed_after_the_start(
        redis_url: str, r: Any, prefix: str, caplog: pytest.LogCaptureFixture, seed: int, starting: str) -> None:
    """Random appends, XDEL (of read and unread entries), XTRIM MINID and MAXLEN between
    micro-batches of random sizes: the warnings (failOnDataLoss=false) add up to exactly the
    entries removed after the query started and before it read them, and every other entry
    is read once."""
    import random

    rng = random.Random(seed)
    a = f"{prefix}:a"
    ids = itertools.count(1)

    def add(n: int) -> None:
        for _ in range(n):
            r.xadd(a, {"n": "0"}, id=f"1000-{next(ids)}")

    def present() -> list[str]:
        return [e.decode() for e, _ in r.xrange(a)]

    def remove(position: EntryId) -> int:
        """One random removal; how many unread entries it took."""
        before = present()
        kind = rng.choice(["xdel", "xdel", "minid", "maxlen"])
        if kind == "xdel" and before:
            r.xdel(a, *rng.sample(before, min(len(before), rng.randint(1, 3))))
        elif kind == "minid" and before:
            r.xtrim(a, minid=rng.choice(before), approximate=False)
        elif kind == "maxlen":  # the new entry itself is gone at once with maxlen 0
            before.append(f"1000-{next(ids)}")
            r.xadd(a, {"n": "0"}, id=before[-1], maxlen=rng.randint(0, 15), approximate=False)
        after = set(present())
        return sum(1 for e in before if e not in after and EntryId.parse(e) > position)

    add(20)
    remove(EntryId(0))  # before the start: not counted
    r.xgroup_create(a, "g", id="1000-9")
    caplog.set_level("WARNING", logger="twopc")
    rd = reader(redis_url, a, startingPosition=starting, failOnDataLoss="false")
    start = rd.initialOffset()
    expected, read = 0, []
    for _ in range(60):
        if rng.random() < 0.5:
            add(rng.randint(1, 8))
        if rng.random() < 0.4:
            expected += remove(Offset.from_json(start).streams[a].id)
        limit = ReadMaxRows(rng.randint(1, 6)) if rng.random() < 0.7 else ReadAllAvailable()
        end = rd.latestOffset(start, limit)
        read += [row[1] for row in read_all(rd, start, end)]
        rd.commit(end)
        start = end
    end = rd.latestOffset(start, ReadAllAvailable())  # one batch to the end: every loss shows by then
    read += [row[1] for row in read_all(rd, start, end)]
    reported = sum(int(m.group(1)) for rec in caplog.records
                   if (m := re.search(r"(\d+) entr(?:y|ies) the query had not read", rec.getMessage())))
    assert reported == expected and expected > 0
    assert len(read) == len(set(read)) and read == sorted(read, key=EntryId.parse)
