"""Prepared-transaction slots: a write transaction claims one of the server's
``max_prepared_transactions`` before it loads a row, so that a task which would find the
server full at ``PREPARE`` learns it first, while it can still do something else (stage
its rows, in ``twopc-jdbc``'s automatic mode) or fail with nothing written.

A claim is a transaction-level advisory lock ``(SLOT_CLASS, k)`` taken inside the
transaction that will be prepared: PostgreSQL keeps it through ``PREPARE TRANSACTION``
(and a server restart) and releases it at ``COMMIT``/``ROLLBACK PREPARED``, or when an
unprepared transaction ends. Keys are per database; the number of keys a transaction may
claim from is the limit minus the prepared transactions that hold no key of this database
(other users', other databases') and minus the keys live transactions hold in other
databases. So twopc's own writers never over-claim between them, whichever sink or process
they run in; a prepared transaction of another user that arrives between a claim and its
``PREPARE`` can still fill the server (then ``PREPARE`` fails, with nothing left prepared).

Key 0 is kept for the driver of a ``twopc-jdbc`` batch whose tasks staged rows: it moves
them into one prepared transaction before its decision, after every task prepared. Its
tasks never claim it, and other writes' tasks claim it last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

__all__ = ["SLOT_CLASS", "Claim", "claim_slot", "wait_for_driver_slot"]

#: the first key of every slot lock (``'tp2c'``); the second is the slot number
SLOT_CLASS = 0x74703263

_CLAIM = """
WITH held AS (
    SELECT l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) AS here,
           l.pid IS NULL AS prepared
    FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.classid = %(cls)s::oid AND l.objsubid = 2 AND l.granted),
room AS (
    SELECT current_setting('max_prepared_transactions')::int AS lim,
           current_setting('max_prepared_transactions')::int
             - (SELECT count(*) FROM pg_prepared_xacts)::int
             + (SELECT count(*) FROM held WHERE here AND prepared)::int
             - (SELECT count(*) FROM held WHERE NOT here AND NOT prepared)::int AS keys)
SELECT lim, keys,
       (SELECT k %% greatest(keys, 1) FROM generate_series(1, keys - %(kept)s) AS k
        WHERE pg_try_advisory_xact_lock(%(cls)s, k %% greatest(keys, 1)) LIMIT 1)
FROM room
"""


@dataclass(frozen=True)
class Claim:
    """What a claim found.

    Attributes:
        limit: the server's ``max_prepared_transactions``.
        keys: how many slots twopc's transactions of this database may hold now (the
            limit less what others hold).
        slot: the slot claimed, or ``None`` when every one of them was taken.
    """

    limit: int
    keys: int
    slot: int | None


def claim_slot(pg: psycopg.Connection[Any], *, keep_driver_slot: bool) -> Claim:
    """Claim a free slot for the open transaction on *pg* (never waits): the lowest from
    slot 1 on, and slot 0 last, unless the write's driver may need it (*keep_driver_slot*).
    (The slots are tried one by one, stopping at the first: a ``LIMIT`` over a filter,
    no ``ORDER BY``, which would try, and take, every one.)

    Raises:
        psycopg.Error: the statement failed.
    """
    row = pg.execute(_CLAIM, {"cls": SLOT_CLASS, "kept": 1 if keep_driver_slot else 0}).fetchone()
    assert row is not None  # a SELECT without FROM filter: one row
    return Claim(int(row[0]), int(row[1]), None if row[2] is None else int(row[2]))


def wait_for_driver_slot(pg: psycopg.Connection[Any]) -> Claim:
    """For the driver's transaction: any free slot, else wait for slot 0 (as long as the
    session's ``lock_timeout`` allows), the one tasks leave to drivers.

    Raises:
        psycopg.Error: the statement failed, or the wait timed out (``55P03``).
    """
    claim = claim_slot(pg, keep_driver_slot=False)
    if claim.slot is not None:
        return claim
    pg.execute("SELECT pg_advisory_xact_lock(%s, 0)", (SLOT_CLASS,))
    return Claim(claim.limit, claim.keys, 0)
