"""``twopc verify``: a read-only check that a sink's target holds what its source or ledger says, Jepsen set-checker
style, with exit codes for automation (:data:`VERIFY_EXIT_CODES`). On PostgreSQL tables: ``--stream`` checks a Redis
Stream's entries against the table (one row per ``(stream, id)``); without it the rows the ledger records per committed
batch (of a checkpoint, or with ``--sink-id`` of a ``txnAppId`` write) against the table's. The target is reached as
``twopc status`` reaches it. Nothing is written anywhere."""

from __future__ import annotations

import argparse
from typing import Any

from twopc.spi import require

from ._verify import PAGE_SIZE

__all__ = ["VERIFY_EXIT_CODES", "add_verify_parser", "run_verify"]

VERIFY_EXIT_CODES = (
    "exit codes: 0 clean: the target holds exactly what was expected; 1 discrepancies: lost, duplicated or "
    "unexpected rows (the report names counts and examples); 2 an error (Redis or the database failed, a wrong "
    "option or command line); 3 cannot tell: no checkpoint or ledger at the path, or one of another sink id, "
    "format or target; the stream or group does not exist; unexpected rows where entries were removed from the "
    "stream (XDEL, XTRIM) inside the range; a decided batch not finished (restart the query, or run "
    "`twopc recover <checkpointLocation>`, first); a ledger "
    "without row counts. Not checked: twopc-redis targets (an HSET repeated overwrites the same key and leaves "
    "no trace, an XADD's entry carries no key tied to its source entry)")


def add_verify_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "verify", parents=[common], epilog=VERIFY_EXIT_CODES,
        help="check that the target holds exactly what the source or the ledger says (read only)",
        description="Read-only check of a PostgreSQL table written by twopc-postgres or twopc-jdbc.\n\n"
                    "With --stream: every entry of a Redis Stream in a range against the table's rows keyed by "
                    "(--stream-column, --id-column), one row per entry: lost (an entry without a row), duplicated "
                    "(more than one), unexpected (a row of the stream's in the range that no entry explains). The "
                    "range: --from/--to (entry ids, both included), or up to where --group stands (its "
                    "last-delivered-id: what the query has committed), or the whole stream. Rows after the range "
                    "(a batch committed, not yet acknowledged) and before it (entries trimmed away) are counted, "
                    "not judged. Memory: one page of ids (--page-size); each page is one statement that scans the "
                    "stream's rows of the table.\n\n"
                    "Without --stream: the rows the ledger records per committed batch (CHECKPOINT, or --sink-id "
                    "of a txnAppId batch write whose ledger is in the target) against the table's count(*), with "
                    "--key the keys found more than once. Counts cannot say which rows, and a lost row and an "
                    "unexpected one cancel out; the table must hold only this sink's writes, and the ledger must "
                    "still hold every batch written to it (it keeps the last minBatchesToRetain, default 100).\n\n"
                    "Every statement runs in a read-only transaction of its own: no temp table, no lock but the "
                    "ACCESS SHARE of a SELECT, for one statement at a time.")
    p.add_argument("--json", action="store_true", help="print JSON for scripts")
    p.add_argument("--stream", help="the Redis Stream key the table's rows come from")
    p.add_argument("--redis", metavar="URL", help="the stream's Redis: redis://host:port/db (a password in it, or "
                                                  "--redis-password-env)")
    p.add_argument("--redis-password-env", metavar="ENVVAR", help="the Redis password, from this variable")
    p.add_argument("--group", help="the range ends where this consumer group stands (the source's group)")
    p.add_argument("--from", dest="first", metavar="ID", help="the range's first entry id (default: the stream's "
                   "first, or its first entry left when entries were trimmed)")
    p.add_argument("--to", dest="last", metavar="ID", help="the range's last entry id")
    p.add_argument("--stream-column", default="stream", help="the table's column holding the stream key "
                                                             "(default: stream)")
    p.add_argument("--id-column", default="id", help="the table's column holding the entry id (default: id)")
    p.add_argument("--key", action="append", default=[], metavar="COLUMN",
                   help="without --stream: a key column of the rows (repeatable); keys found more than once are "
                        "duplicates")
    p.add_argument("--page-size", type=int, default=PAGE_SIZE, help=f"stream ids per page (default {PAGE_SIZE})")


def run_verify(args: argparse.Namespace, checkpoint: str | None) -> int:
    """Run ``twopc verify``; the exit code (0, 1 or 3: :data:`VERIFY_EXIT_CODES`). MissingExtraError
    without psycopg (or redis for ``--stream``); TwoPCError (exit 2) or CannotTell (exit 3)."""
    require("psycopg", "postgres", "twopc verify")
    if args.stream:
        require("redis", "redis", "twopc verify --stream")
    from ._verify_run import run_verify as run  # the drivers load here, not with the CLI
    return run(args, checkpoint)
