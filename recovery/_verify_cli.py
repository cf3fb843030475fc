"""``twopc verify``: a read-only check that a sink's target holds what its source or its
ledger says it should, Jepsen set-checker style (expected, found, lost, duplicated,
unexpected), with exit codes for automation (:data:`VERIFY_EXIT_CODES`).

Two forms, on PostgreSQL tables (``twopc-postgres``, ``twopc-jdbc`` on PostgreSQL):

- ``--stream``: a Redis Stream's entries against the table a pipeline writes them to, one
  row per entry keyed by ``(stream, id)`` (:mod:`recovery._verify_stream`);
- without it: the rows the ledger of a checkpoint (or, with ``--sink-id``, of a batch write
  with ``txnAppId`` whose ledger is in the target) records per committed batch against the
  table's rows (:mod:`recovery._verify_batch`).

The target is reached as ``twopc status`` reaches it: from what the checkpoint records plus
the secrets, or from ``--format`` and ``--option``. Nothing is written anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import psycopg

from sinks._secrets import secret_guesses
from sinks.redis._clients import ClientConfig, split_url
from sinks.redis_stream._ids import EntryId
from sinks.redis_stream._server import StreamServer
from sinks.sql._engines import dbapi_connect_params
from sinks.sql._names import parse_table_name
from sinks.sql._options import JdbcOptions
from twopc import CommitLedger, ConfigurationError, SinkError, SinkUnavailableError, TwoPhaseCommitSink, redact
from twopc._target import target_ledger_of

from ._verify import SetCheck
from ._verify_batch import verify_batches
from ._verify_stream import PAGE_SIZE, read_only_session, verify_stream

__all__ = ["VERIFY_EXIT_CODES", "add_verify_parser", "run_verify"]

VERIFY_EXIT_CODES = (
    "exit codes: 0 clean: the target holds exactly what was expected; 1 discrepancies: lost, duplicated or "
    "unexpected rows (the report names counts and examples); 2 an error (Redis or the database failed, a wrong "
    "option or command line); 3 cannot tell: no checkpoint or ledger at the path, or one of another sink id, "
    "format or target; the stream or group does not exist; unexpected rows where entries were removed from the "
    "stream (XDEL, XTRIM) inside the range; a decided batch not finished (run twopc recover first); a ledger "
    "without row counts. Not checked: twopc-redis targets (an HSET repeated overwrites the same key and leaves "
    "no trace, an XADD's entry carries no key tied to its source entry)")


def add_verify_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``verify`` to the subcommands *sub* (``twopc``'s), with *common*'s options."""
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
    """Run ``twopc verify``; returns the exit code (0, 1 or 3: see :data:`VERIFY_EXIT_CODES`).

    Raises:
        TwoPCError: an error (exit 2), or ``_CannotTell`` from the checkpoint's checks (exit 3).
    """
    from . import _cli  # the checkpoint's checks are status's own; _cli imports this module

    if args.page_size < 1:
        raise ConfigurationError(f"--page-size must be >= 1, got {args.page_size}")
    ledger: CommitLedger | None = None
    sink_id = args.sink_id
    if checkpoint:
        reader = CommitLedger(checkpoint, read_only=True)
        sink_id = _cli._recorded_sink_id(reader, checkpoint)
        if args.sink_id and args.sink_id != sink_id:
            raise _cli._CannotTell(f"checkpoint {checkpoint} belongs to sink id {sink_id!r}, but --sink-id "
                                   f"{args.sink_id!r} was given: drop --sink-id, or give the checkpoint of sink id "
                                   f"{args.sink_id!r}")
        record = reader.target_record()
        options = _cli._merged(record, _cli._options(args.option, args.option_env))
        sink = _cli.build_sink(_cli._format(args.format, checkpoint, record), options)
        with sink:
            _cli._check_target(sink, reader, sink_id, checkpoint, record)
            return _verify(args, sink, options, reader, sink_id)
    else:
        if not args.format:
            raise ConfigurationError("give the checkpoint, or --format and --option url=... --option dbtable=... "
                                     "for the table")
        options = _cli._options(args.option, args.option_env)
        sink = _cli.build_sink(args.format, options)
    with sink:
        return _verify(args, sink, options, ledger, sink_id)


def _verify(args: argparse.Namespace, sink: TwoPhaseCommitSink[Any, Any, Any], options: dict[str, str],
            ledger: CommitLedger | None, sink_id: str | None) -> int:
    jdbc = _jdbc_options(sink)
    if args.stream is None:
        found = ledger if ledger is not None else _target_ledger(sink, sink_id)
        if isinstance(found, SetCheck):
            return _report(found, args.json)
        ledger = found
    table = parse_table_name(jdbc.table, "postgresql")
    secrets = [*secret_guesses(options), jdbc.url.password]
    with _connect(jdbc, secrets) as pg:
        try:
            if args.stream is None:
                assert ledger is not None and sink_id is not None  # a ledger was found for it
                return _report(verify_batches(pg, table, ledger, sink_id, keys=tuple(args.key)), args.json)
            server = StreamServer(_redis(args))
            check = verify_stream(
                pg, table, server, args.stream, group=args.group,
                first=EntryId.parse(args.first, "--from") if args.first else None,
                last=EntryId.parse(args.last, "--to") if args.last else None,
                stream_column=args.stream_column, id_column=args.id_column, page_size=args.page_size,
                progress=lambda line: print(line, file=sys.stderr, flush=True))
            return _report(check, args.json)
        except psycopg.Error as exc:
            raise SinkError(f"{table.display()}: the database failed: {_clean(exc, secrets)}") from None


def _report(check: SetCheck, as_json: bool) -> int:
    print(json.dumps(check.to_json(), indent=1, sort_keys=True) if as_json else check.render())
    return check.verdict


def _jdbc_options(sink: TwoPhaseCommitSink[Any, Any, Any]) -> JdbcOptions:
    options = getattr(sink, "options", None)
    if not isinstance(options, JdbcOptions) or options.dialect != "postgresql":
        raise ConfigurationError(f"twopc verify checks PostgreSQL tables (twopc-postgres, twopc-jdbc on "
                                 f"PostgreSQL), not {sink.describe()}")
    return options


def _target_ledger(sink: TwoPhaseCommitSink[Any, Any, Any], sink_id: str | None) -> CommitLedger | SetCheck:
    """The ledger of the write *sink_id* (its ``txnAppId``) kept in the target, read only."""
    if not sink_id:
        raise ConfigurationError("without --stream, give the checkpoint, or --sink-id (the txnAppId) of a batch "
                                 "write whose ledger is in the target")
    backend = target_ledger_of(sink)
    if backend is None:
        raise ConfigurationError(f"{sink.describe()} keeps no ledger in its target: give the checkpoint")
    if sink_id not in backend.writers():
        known = ", ".join(backend.writers()) or "none"
        return SetCheck(f"sink {sink_id!r} in {backend.location}", cannot_tell=[
            f"{backend.location} records no write of sink id {sink_id!r} (it records: {known})"])
    return CommitLedger(f"{backend.location} sink {sink_id}", store=backend.store(sink_id), read_only=True)


def _clean(exc: BaseException, secrets: list[str | None]) -> str:
    return redact(" ".join(str(exc).split()), secrets)


def _connect(jdbc: JdbcOptions, secrets: list[str | None]) -> psycopg.Connection[Any]:
    """A psycopg connection to the table's server, every statement read only."""
    _module, params = dbapi_connect_params(jdbc.url, jdbc.net_timeouts())
    try:
        pg: psycopg.Connection[Any] = psycopg.connect(**params)
        read_only_session(pg)
    except psycopg.Error as exc:
        raise SinkUnavailableError(f"cannot reach the table's server: {_clean(exc, secrets)}") from None
    return pg


def _redis(args: argparse.Namespace) -> ClientConfig:
    if not args.redis:
        raise ConfigurationError("--stream needs --redis redis://host:port/db (the stream's Redis)")
    url, password = split_url(args.redis)
    if args.redis_password_env:
        if args.redis_password_env not in os.environ:
            raise ConfigurationError(f"--redis-password-env names {args.redis_password_env}, which is not set")
        password = os.environ[args.redis_password_env]
    return ClientConfig(url, password, 60.0, 10.0)
