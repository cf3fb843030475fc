"""The one transaction-id type (:class:`twopc.Xid`): its two forms, what parses, the byte
limits of each target, and the ids earlier versions wrote (they must keep parsing)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twopc import ConfigurationError, TransactionContext, Xid
from twopc.sinks.sql._registry import dialect_for
from twopc.spi import ProtocolError

POSTGRES, MYSQL = dialect_for("postgresql"), dialect_for("mariadb")

SINK_IDS = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
NUMS = st.integers(min_value=0, max_value=2**62)


@given(SINK_IDS, NUMS, st.integers(min_value=0, max_value=2**31 - 1), NUMS)
def test_both_forms_round_trip(sink_id: str, batch: int, partition: int, attempt: int) -> None:
    xid = Xid.new(sink_id, batch, partition, attempt)
    assert Xid.parse(str(xid)) == xid
    assert Xid.parse(xid.path_name) == xid
    assert str(xid).startswith(Xid.prefix(sink_id)) and ":" not in xid.path_name


def test_ids_written_by_earlier_versions_still_parse() -> None:
    # PostgreSQL GIDs, XA gtrids and staging ids (canonical), Redis and file ids (path form)
    assert Xid.parse("twopc:q3f9a0c1d2e4b5a6c:12:3:4567:0a1b2c3d") == Xid("q3f9a0c1d2e4b5a6c", 12, 3, 4567, "0a1b2c3d")
    assert Xid.parse("eph-6560f2a1deadbeef~0~1~9~ffffffff") == Xid("eph-6560f2a1deadbeef", 0, 1, 9, "ffffffff")


@pytest.mark.parametrize("text", [
    "", "twopc:", "twopc:q:1:2:3", "twopc:q:1:2:3:0A1B2C3D", "twopc:q:1:2:3:0a1b2c3", "twopc:-q:1:2:3:0a1b2c3d",
    "twopc:q:x:2:3:0a1b2c3d", "twopc:q:1:2:3:0a1b2c3d:extra", "other:q:1:2:3:0a1b2c3d", "q~1~2~0a1b2c3d",
    "twopc:q:1:2:3:0a1b2c3d'; DROP TABLE t; --", "q~1~2~3~0a1b2c3d/../../etc",
])
def test_anything_else_is_not_an_id(text: str) -> None:
    assert Xid.parse(text) is None
    with pytest.raises(ProtocolError, match="not a"):
        Xid.checked(text)


def test_checked_enforces_the_target_limit() -> None:
    xid = Xid.new("q" * 60, 20261122, 12, 123456)
    assert Xid.checked(str(xid), max_bytes=POSTGRES.max_id_bytes) == str(xid)
    with pytest.raises(ProtocolError):
        Xid.checked(str(xid), max_bytes=MYSQL.max_id_bytes)


def test_fitting_names_the_limit_and_the_fix() -> None:
    # the default sink id fits
    assert Xid.new("q0123456789abcdef", 20261122, 199, 1234567).fitting(MYSQL.max_id_bytes, MYSQL.name)
    with pytest.raises(ConfigurationError) as info:
        Xid.new("q" * 60, 20261122, 12, 123456).fitting(MYSQL.max_id_bytes, MYSQL.name)
    message = str(info.value)
    assert "64-byte" in message and "sinkId" in message and "at most" in message


def test_the_context_makes_a_fresh_id_per_call() -> None:
    ctx = TransactionContext("q1", 3, 0, 17)
    a, b = ctx.xid(), ctx.xid()
    assert (a.sink_id, a.batch_id, a.partition_id, a.attempt_id) == ("q1", 3, 0, 17)
    assert a.nonce != b.nonce  # 32 random bits: a retried attempt never reuses an id
    with pytest.raises(ConfigurationError, match="sinkId"):
        TransactionContext("bad:id", 0, 0, 0).xid()
