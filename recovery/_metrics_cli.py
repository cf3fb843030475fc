"""``twopc metrics``: serve the in-doubt gauges of checkpoints from a process of its own.

A query's ``metricsPort`` server ends with its driver, so the moment a batch is left in doubt
(a driver killed between its decision and its commit) is the moment its gauges go away. This
exporter outlives any query: it reads each checkpoint's ledger read only, as ``twopc status``
does (a checkpoint without a twopc ledger is refused the same way, exit 3), and serves the
:data:`~twopc.operations._metrics.CHECKPOINT_GAUGES` with the names and labels of the driver's collector
(:class:`~twopc.operations._metrics.MetricsCollector`, the same code), so the same alerts fire while the
query is down. Over HTTP (``--port``, loopback unless ``--host`` names an interface) and/or as
a file for node exporter's textfile collector (``--textfile``, replaced atomically).
"""

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
    """Add the ``metrics`` command to the ``twopc`` command line's subparsers *sub*."""
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
    """Serve until interrupted (``--once``: write the textfile and return). Returns 0.

    Raises:
        ConfigurationError: neither ``--port`` nor ``--textfile``, a textfile not named
            ``*.prom``, ``--once`` with ``--port``, or the port cannot be bound.
        twopc.recovery._common.CannotTell: a checkpoint holds no twopc ledger.
    """
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
                _write(args.textfile, registry)
                if args.once:
                    return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def _write(path: str, registry: CollectorRegistry) -> None:
    """Replace *path* with the metrics at once (a reader sees the old file or the new one).

    Raises:
        ConfigurationError: the file cannot be written.
    """
    try:
        write_to_textfile(path, registry)
    except OSError as exc:
        raise ConfigurationError(f"twopc metrics cannot write --textfile {path}: {exc}") from None
