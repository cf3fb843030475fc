"""Prepared-transaction slots: a write transaction claims one of the server's ``max_prepared_transactions`` before it
loads a row, so a task that would find the server full at ``PREPARE`` learns it while it can still stage its rows
(``twopc-jdbc``'s auto mode) or fail with nothing written. A claim is an advisory lock ``(SLOT_CLASS, k)`` taken in
the transaction to be prepared, which keeps it through ``PREPARE TRANSACTION`` and restarts until it ends. The keys
free to claim are the limit less the prepared transactions holding no key of this database and the keys live
transactions hold in other databases, so twopc's writers never over-claim between them (another user's ``PREPARE`` in
between can still fill the server: then ``PREPARE`` fails). Key 0 is kept for the driver of a ``twopc-jdbc`` batch
that moves staged rows into one prepared transaction: its tasks never claim it, other writes' tasks claim it last."""

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
    """What a claim found: the server's ``max_prepared_transactions``, the slots (keys) twopc's
    transactions of this database may hold now, and the slot claimed (``None``: all taken)."""

    limit: int
    keys: int
    slot: int | None


def claim_slot(pg: psycopg.Connection[Any], *, keep_driver_slot: bool) -> Claim:
    """Claim a free slot for the open transaction on *pg* without waiting: the lowest from 1, and 0
    last unless *keep_driver_slot* (``LIMIT`` over a filter without ``ORDER BY``: tries one by one)."""
    row = pg.execute(_CLAIM, {"cls": SLOT_CLASS, "kept": 1 if keep_driver_slot else 0}).fetchone()
    assert row is not None  # a SELECT without FROM filter: one row
    return Claim(int(row[0]), int(row[1]), None if row[2] is None else int(row[2]))


def wait_for_driver_slot(pg: psycopg.Connection[Any]) -> Claim:
    """For the driver's transaction: any free slot, else wait for slot 0 up to ``lock_timeout``
    (``55P03`` when that runs out)."""
    if (claim := claim_slot(pg, keep_driver_slot=False)).slot is not None:
        return claim
    pg.execute("SELECT pg_advisory_xact_lock(%s, 0)", (SLOT_CLASS,))
    return Claim(claim.limit, claim.keys, 0)
