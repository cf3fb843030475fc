"""``twopc verify``'s run: reach the target as ``twopc status`` does, then the stream or batch
check. Imported when the command runs: it needs psycopg (and redis), which status does not."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import psycopg

from twopc import CommitLedger, ConfigurationError, SinkError, TwoPhaseCommitSink
from twopc.sinks._redis.clients import ClientConfig, split_url
from twopc.sinks._redis.ids import EntryId
from twopc.sinks._redis.stream_server import StreamServer
from twopc.sinks._secrets import secret_guesses
from twopc.sinks.sql._engines import dbapi_connect_params
from twopc.sinks.sql._names import parse_table_name
from twopc.sinks.sql.options import JdbcOptions
from twopc.spi import SinkUnavailableError, redact
from twopc.spi.lease import target_ledger_of

from ._common import build_sink, check_recorded_target, cli_options, open_checkpoint, recorded_sink
from ._verify import SetCheck
from ._verify_batch import verify_batches
from ._verify_stream import read_only_session, verify_stream

__all__ = ["run_verify"]


def run_verify(args: argparse.Namespace, checkpoint: str | None) -> int:
    """Run ``twopc verify``; the exit code (see :data:`VERIFY_EXIT_CODES`)."""
    if args.page_size < 1:
        raise ConfigurationError(f"--page-size must be >= 1, got {args.page_size}")
    if checkpoint:
        reader, sink_id = open_checkpoint(checkpoint, args.sink_id)
        record = reader.target_record()
        sink, options = recorded_sink(args, checkpoint, record)
        with sink:
            check_recorded_target(sink, reader, sink_id, checkpoint, record)
            return _verify(args, sink, options, reader, sink_id)
    if not args.format:
        raise ConfigurationError("give the checkpoint, or --format and --option url=... --option dbtable=... "
                                 "for the table")
    options = cli_options(args.option, args.option_env)
    with build_sink(args.format, options) as sink:
        return _verify(args, sink, options, None, args.sink_id)


def _verify(args: argparse.Namespace, sink: TwoPhaseCommitSink[Any, Any, Any], options: dict[str, str],
            ledger: CommitLedger | None, sink_id: str | None) -> int:
    jdbc = getattr(sink, "options", None)
    if not isinstance(jdbc, JdbcOptions) or jdbc.dialect != "postgresql":
        raise ConfigurationError(f"twopc verify checks PostgreSQL tables (twopc-postgres, twopc-jdbc on "
                                 f"PostgreSQL), not {sink.describe()}")
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
            return _report(verify_stream(
                pg, table, server, args.stream, group=args.group,
                first=EntryId.parse(args.first, "--from") if args.first else None,
                last=EntryId.parse(args.last, "--to") if args.last else None,
                stream_column=args.stream_column, id_column=args.id_column, page_size=args.page_size,
                progress=lambda line: print(line, file=sys.stderr, flush=True)), args.json)
        except psycopg.Error as exc:
            raise SinkError(f"{table.display()}: the database failed: {_clean(exc, secrets)}") from None


def _report(check: SetCheck, as_json: bool) -> int:
    print(json.dumps(check.to_json(), indent=1, sort_keys=True) if as_json else check.render())
    return check.verdict


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
