"""``python -m recovery``: inspect or run recovery for one checkpoint by hand."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from twopc import (
    BatchState,
    CommitLedger,
    ConfigurationError,
    RecoveryCoordinator,
    TwoPCError,
    TwoPhaseCommitDataSource,
    TwoPhaseCommitSink,
)

__all__ = ["build_sink", "main"]


def build_sink(format_name: str, options: Mapping[str, str]) -> TwoPhaseCommitSink[Any, Any, Any]:
    """Build the sink behind a data source name (``twopc-postgres``, ``twopc-file``) or a
    ``module:SinkClass`` path, from writer options.

    Raises:
        ConfigurationError: unknown format, or the sink refuses the options.
    """
    import sinks

    for ds in sinks.DATA_SOURCES:
        if ds.name() == format_name:
            return ds.sink_class.from_options(options)
    if ":" in format_name:
        module, _, attr = format_name.partition(":")
        obj = getattr(importlib.import_module(module), attr)
        if isinstance(obj, type) and issubclass(obj, TwoPhaseCommitDataSource):
            obj = obj.sink_class
        if isinstance(obj, type) and issubclass(obj, TwoPhaseCommitSink):
            return obj.from_options(options)
    known = ", ".join(ds.name() for ds in sinks.DATA_SOURCES)
    raise ConfigurationError(f"unknown sink format {format_name!r}: use one of {known}, or module:SinkClass")


def _options(pairs: Sequence[str], env_pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigurationError(f"--option takes key=value, got {pair!r}")
        out[key] = value
    for pair in env_pairs:
        key, sep, var = pair.partition("=")
        if not sep or var not in os.environ:
            raise ConfigurationError(f"--option-env takes key=ENVVAR of a set variable, got {pair!r}")
        out[key] = os.environ[var]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m recovery",
        description="Finish decided batches and roll back orphaned prepared transactions of a twopc sink.",
    )
    parser.add_argument("--checkpoint", required=True, help="the query's checkpointLocation")
    parser.add_argument("--format", required=True, help="twopc-postgres, twopc-file, or module:SinkClass")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a writer option of the sink (repeatable)")
    parser.add_argument("--option-env", action="append", default=[], metavar="KEY=ENVVAR",
                        help="a writer option read from an environment variable (for passwords)")
    parser.add_argument("--sink-id", help="default: the id recorded in the checkpoint")
    parser.add_argument("--dry-run", action="store_true", help="only print what would be done")
    parser.add_argument("--accept-lost", type=int, metavar="BATCH",
                        help="mark a decided batch whose transactions were lost as done (after you "
                             "restored its rows by other means)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        ledger = CommitLedger(args.checkpoint)
        sink_id = args.sink_id or ledger.recorded_sink_id()
        if not sink_id:
            print(f"no twopc sink has written to {args.checkpoint} yet: nothing to recover")
            return 0
        if args.accept_lost is not None:
            if ledger.state(args.accept_lost) is not BatchState.DECIDED:
                raise ConfigurationError(f"batch {args.accept_lost} is not decided-and-unfinished")
            ledger.mark_committed(args.accept_lost, summary={"accepted_lost_by_operator": True})
            print(f"batch {args.accept_lost} marked done; its lost transactions will not be retried")
            return 0
        sink = build_sink(args.format, _options(args.option, args.option_env))
        with sink:
            rc = RecoveryCoordinator(sink, ledger, sink_id=sink_id)
            if args.dry_run:
                plan = rc.plan()
                print(f"sink {sink_id} on {sink.describe()}")
                print(f"  batches to finish:        {list(plan.batches_to_finish) or 'none'}")
                print(f"  transactions to commit:   {len(plan.transactions_to_commit)}")
                print(f"  orphans to roll back:     {len(plan.orphans_to_roll_back)}")
                return 0
            print(rc.run().summary())
        return 0
    except TwoPCError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
