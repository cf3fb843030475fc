"""``twopc metrics``: serve the in-doubt gauges of checkpoints from a process of its own.

A query's ``metricsPort`` server ends with its driver, just when a batch is left in doubt; this
exporter outlives any query. It reads each ledger read only, as ``twopc status`` does (exit 3
without one), and serves :data:`~twopc.operations._metrics.CHECKPOINT_GAUGES` with the driver's
collector's names and labels, so the same alerts fire while the query is down: over HTTP
(``--port``, loopback unless ``--host``) and/or as a textfile (``--textfile``, replaced atomically)."""

from __future__ import annotations

import argparse
import time

from prometheus_client import CollectorRegistry, start_http_server, write_to_textfile

from twopc import CommitLedger, ConfigurationError
from twopc.spi.operations import LOOPBACK, MetricsCollector

from ._common import recorded_sink_id

__all__ = ["add_parser", "run"]

DEFAULT_INTERVAL = 15.0


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "metrics", help="serve the in-doubt gauges of checkpoints to Prometheus, whether their query runs or not",
        description="Serve twopc_in_doubt_transactions, twopc_oldest_in_doubt_seconds and "
                    "twopc_last_commit_timestamp_seconds of each checkpoint (read only, the names and labels of the "
                    "query's own metricsPort server) over HTTP and/or as a node exporter textfile.")
    parser.add_argument("--checkpoint", action="append", required=True, metavar="PATH",
                        help="a query's checkpointLocation (repeatable)")
    parser.add_argument("--port", type=int, help="serve http://HOST:PORT/metrics")
    parser.add_argument("--host", default=LOOPBACK,
                        help=f"the interface to listen on (default {LOOPBACK}, this machine only; 0.0.0.0 for every "
                             f"one)")
    parser.add_argument("--textfile", metavar="PATH.prom",
                        help="write the metrics to this file (replaced atomically) for node exporter's textfile "
                             "collector")
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL, metavar="SECONDS",
                        help=f"seconds between two writes of --textfile (default {DEFAULT_INTERVAL:g})")
    parser.add_argument("--once", action="store_true", help="write --textfile once and exit (for cron)")


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted (``--once``: write the textfile and return 0). ConfigurationError for
    neither ``--port`` nor ``--textfile``, a textfile not ``*.prom``, ``--once`` with ``--port``, or
    a port that cannot be bound; CannotTell for a checkpoint without a ledger."""
    if args.port is None and args.textfile is None:
        raise ConfigurationError("give --port N (serve over HTTP) and/or --textfile PATH.prom (node exporter's "
                                 "textfile collector)")
    if args.textfile is not None and not args.textfile.endswith(".prom"):
        raise ConfigurationError(f"--textfile {args.textfile}: node exporter's textfile collector reads only files "
                                 f"named *.prom: name it {args.textfile}.prom")
    if args.once and (args.port is not None or args.textfile is None):
        raise ConfigurationError("--once writes --textfile once and exits: give --textfile without --port")
    if args.interval <= 0:
        raise ConfigurationError(f"--interval must be above 0 seconds, got {args.interval:g}")
    for checkpoint in args.checkpoint:
        recorded_sink_id(CommitLedger(checkpoint, read_only=True), checkpoint)
    registry = CollectorRegistry()
    registry.register(MetricsCollector(list(args.checkpoint), checkpoint_gauges_only=True))
    if args.port is not None:
        try:
            start_http_server(args.port, addr=args.host, registry=registry)
        except OSError as exc:
            raise ConfigurationError(f"twopc metrics cannot listen on {args.host}:{args.port}: {exc}: give a free "
                                     f"--port") from None
        print(f"serving {len(args.checkpoint)} checkpoint(s) on http://{args.host}:{args.port}/metrics", flush=True)
    if args.textfile is not None and not args.once:
        print(f"writing {len(args.checkpoint)} checkpoint(s) to {args.textfile} every {args.interval:g} s", flush=True)
    try:
        while True:
            if args.textfile is not None:
                try:  # replaces the file atomically
                    write_to_textfile(args.textfile, registry)
                except OSError as exc:
                    raise ConfigurationError(f"twopc metrics cannot write --textfile {args.textfile}: {exc}") from None
                if args.once:
                    return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0
