"""``twopc verify`` of a sink's committed batches: the rows its ledger records against the table's.

The rows carry no batch id, so it compares counts server-side (``count(*)`` against the sum over
the committed batches; with key columns, the keys found more than once). It cannot tell which
rows are lost or unexpected, and a lost and an unexpected row cancel out. The table must hold
only this sink's writes, and the ledger must still record every batch (``minBatchesToRetain``)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from twopc import CommitLedger
from twopc.sinks.sql._names import TableName
from twopc.spi.operations import recover_command

from ._verify import EXAMPLES, SetCheck

__all__ = ["verify_batches"]

#: how a staging-mode overwrite empties the table first (:class:`twopc.sinks.StagingHandle`'s ``write``)
_EMPTIES = frozenset(("drop", "truncate", "delete"))


def verify_batches(pg: psycopg.Connection[Any], table: TableName, ledger: CommitLedger, sink_id: str, *,
                   keys: tuple[str, ...] = ()) -> SetCheck:
    """Compare *table* with the rows *ledger* records for *sink_id*'s committed batches; with *keys*,
    also count keys found more than once. LedgerError or psycopg.Error when a read fails."""
    check = SetCheck(f"sink {sink_id!r}'s committed batches in {ledger.location} against {table.display()}"
                     + (f" (key {', '.join(keys)})" if keys else ""))
    committed = ledger.committed_batches()
    unknown = []
    for decision in ledger.decisions(committed):
        rows = [getattr(h, "rows", -1) for h in decision.handles]
        writes = {getattr(h, "write", "") for h in decision.handles}
        if writes & _EMPTIES:  # an overwrite: the table holds this batch's rows and the later ones'
            check.expected = 0
            check.notes.append(f"batch {decision.batch_id} overwrote the table: earlier batches do not count")
        if any(r < 0 for r in rows) or "ignore" in writes:
            unknown.append(decision.batch_id)
        else:
            check.expected += sum(rows)
    pending = [d.batch_id for d in ledger.pending()]
    if not committed and not pending:
        check.cannot_tell.append(f"the ledger records no committed batch of sink {sink_id!r}: check the "
                                 f"checkpoint or the sink id")
    if pending:
        run = recover_command(None if ledger.in_target else ledger.checkpoint_location, sink_id=sink_id)
        check.cannot_tell.append(f"batch(es) {pending} are decided but not finished: their rows may be in doubt; "
                                 f"restart the query or run {run} first")
    if unknown:
        check.cannot_tell.append(f"the ledger does not record the row counts of batch(es) {unknown[:10]} (handles "
                                 f"rebuilt by recovery, a mode('ignore') write, or a sink that does not count rows)")
    if committed:
        check.notes.append(f"the ledger records {len(committed)} committed batch(es), {committed[0]} to "
                           f"{committed[-1]}")
    ident = sql.Identifier(table.schema, table.name) if table.schema else sql.Identifier(table.name)
    row = pg.execute(sql.SQL("SELECT count(*) FROM {}").format(ident)).fetchone()
    check.found = int(row[0]) if row else 0
    if keys:
        cols = sql.SQL(", ").join(sql.Identifier(k) for k in keys)
        shown = sql.SQL(" || ', ' || ").join(sql.SQL("coalesce({}::text, 'null')").format(sql.Identifier(k))
                                             for k in keys)
        dup = pg.execute(sql.SQL(
            "WITH d AS (SELECT {shown} AS k, count(*) AS n FROM {t} GROUP BY {cols} HAVING count(*) > 1) "
            "SELECT count(*), coalesce(sum(n - 1), 0), ARRAY(SELECT k FROM d LIMIT {ex}) FROM d").format(
                shown=shown, t=ident, cols=cols, ex=sql.Literal(EXAMPLES))).fetchone()
        if dup is not None:
            check.duplicated, check.extra_rows = int(dup[0]), int(dup[1])
            check.add_examples("duplicated", dup[2])
    distinct = check.found - check.extra_rows
    if not unknown:
        check.lost = max(0, check.expected - distinct)
        check.unexpected = max(0, distinct - check.expected)
    return check
