"""``twopc status`` / ``twopc recover`` (also ``python -m recovery``): inspect a checkpoint's
sink and run recovery by hand."""

from __future__ import annotations

import argparse
import importlib
import json
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
    resolve_abandoned,
    sink_status,
)
from twopc._logs import configure_cli_logging, log_event
from twopc._target import open_target_ledger, target_ledger_of
from twopc._target_check import check_target

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


_COMMANDS = ("status", "recover")


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--checkpoint", help="the query's checkpointLocation; without it, the writes without a "
                                             "checkpoint whose ledger is in the target (--format and --option "
                                             "url=... name the target)")
    common.add_argument("--format", help="twopc-postgres, twopc-file, ... or module:SinkClass (required unless "
                                         "the checkpoint has no sink yet, or with --accept-lost)")
    common.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="a writer option of the sink (repeatable)")
    common.add_argument("--option-env", action="append", default=[], metavar="KEY=ENVVAR",
                        help="a writer option read from an environment variable (for passwords)")
    common.add_argument("--sink-id", help="default: the id recorded in the checkpoint")
    parser = argparse.ArgumentParser(
        prog="twopc",
        description="Operate a twopc sink: `status` shows what is unsettled (exit 1 when an operator is "
                    "needed), `recover` finishes decided batches and rolls back orphaned prepared transactions. "
                    "Also `python -m recovery [status|recover]`; without a command, `recover`.")
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", parents=[common], help="show every unsettled transaction (read-only)")
    status.add_argument("--json", action="store_true", help="print JSON for scripts")
    recover = sub.add_parser("recover", parents=[common], help="run recovery")
    recover.add_argument("--dry-run", action="store_true", help="only print what would be done")
    recover.add_argument("--accept-lost", type=int, metavar="BATCH",
                         help="mark a decided batch whose transactions were lost as done (after you "
                              "restored its rows by other means)")
    recover.add_argument("--retarget", action="store_true",
                         help="move the checkpoint to the target the --format and --option name (a server "
                              "that moved with its data): refused while a decided batch waits in the old one")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``twopc status`` / ``twopc recover``. Returns the exit code: 0 done (status:
    nothing needs an operator), 1 status found something that needs an operator, 2 error."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    if not args_in or (args_in[0] not in _COMMANDS and args_in[0] not in ("-h", "--help")):
        args_in = ["recover", *args_in]  # `python -m recovery --checkpoint ...` predates the commands
    args = _parser().parse_args(args_in)
    configure_cli_logging()
    try:
        if not args.checkpoint:
            return _target_form(args)
        ledger = CommitLedger(args.checkpoint)
        sink_id = args.sink_id or ledger.recorded_sink_id()
        if not sink_id:
            what = "show" if args.command == "status" else "recover"
            print(f"no twopc sink has written to {args.checkpoint} yet: nothing to {what}")
            return 0
        if args.command == "recover" and args.accept_lost is not None:
            return _accept_lost(ledger, args.accept_lost)
        if not args.format:
            raise ConfigurationError("--format is required: the data source name the query writes with "
                                     "(twopc-postgres, twopc-jdbc, ...) or module:SinkClass")
        sink = build_sink(args.format, _options(args.option, args.option_env))
        with sink:
            if args.command == "recover" and args.retarget:
                return _retarget(sink, ledger, sink_id)
            if args.command == "status":
                check_target(sink, ledger, sink_id, record=False)
                return _status(sink, ledger, sink_id, as_json=args.json)
            return _recover(sink, ledger, sink_id, dry_run=args.dry_run)
    except TwoPCError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _target_form(args: argparse.Namespace) -> int:
    """``status`` / ``recover`` of the writes without a checkpoint that keep their ledger in
    the target (see :mod:`twopc._target`): every writer recorded there, live or gone."""
    if not args.format:
        raise ConfigurationError("give --checkpoint (the query's checkpointLocation), or --format and --option "
                                 "url=... (and dbtable=...) for the writes without a checkpoint")
    sink = build_sink(args.format, _options(args.option, args.option_env))
    with sink:
        backend = target_ledger_of(sink)
        if backend is None:
            raise ConfigurationError(f"{sink.describe()} keeps no ledger in its target: give --checkpoint")
        if args.command == "recover":
            if getattr(args, "accept_lost", None) is not None or args.dry_run or args.retarget:
                raise ConfigurationError("--accept-lost, --dry-run and --retarget need --checkpoint")
            writers = backend.writers()
            done = resolve_abandoned(sink, backend)
            live = [w for w in writers if w not in done]
            print(f"{backend.location}: resolved {len(done)} write(s) whose driver is gone"
                  + (f" ({', '.join(done)})" if done else "") + f"; left {len(live)} running write(s) alone"
                  + (f" ({', '.join(live)})" if live else ""))
            return 0
        needs = False
        out = []
        for writer in backend.writers():
            with backend.take(writer) as free:
                status = sink_status(sink, open_target_ledger(backend, writer), writer)
            needs = needs or (free and status.needs_operator)
            if args.json:
                out.append({**status.to_json(), "writer_running": not free})
            else:
                print(status.render())
                print(f"  writer: {'gone: the next write or twopc recover resolves it' if free else 'running'}")
        if args.json:
            print(json.dumps(out, indent=1, sort_keys=True))
        elif not out and not backend.writers():
            print(f"{backend.location}: no write without a checkpoint is recorded")
        return 1 if needs else 0


def _status(sink: TwoPhaseCommitSink[Any, Any, Any], ledger: CommitLedger, sink_id: str, *, as_json: bool) -> int:
    status = sink_status(sink, ledger, sink_id)
    print(json.dumps(status.to_json(), indent=1, sort_keys=True) if as_json else status.render())
    return 1 if status.needs_operator else 0


def _accept_lost(ledger: CommitLedger, batch: int) -> int:
    if ledger.state(batch) is not BatchState.DECIDED:
        raise ConfigurationError(f"batch {batch} is not decided-and-unfinished")
    ledger.mark_committed(batch, summary={"accepted_lost_by_operator": True})
    log_event(logging.getLogger("twopc.recovery"), logging.WARNING, "lost_accepted",
              "twopc: batch %s marked done by an operator; its lost transactions will not be retried",
              batch, batch=batch)
    print(f"batch {batch} marked done; its lost transactions will not be retried")
    return 0


def _retarget(sink: TwoPhaseCommitSink[Any, Any, Any], ledger: CommitLedger, sink_id: str) -> int:
    identity = sink.target_identity()
    if identity is None:
        raise ConfigurationError(f"{sink.describe()} does not name its target: there is nothing to retarget")
    previous = ledger.retarget(identity, sink_id, instance=sink.target_instance())
    log_event(logging.getLogger("twopc.recovery"), logging.WARNING, "retargeted",
              "twopc: checkpoint %s moved by an operator from [%s] to [%s]", ledger.checkpoint_location,
              previous, identity, previous=previous, target=identity)
    print(f"checkpoint {ledger.checkpoint_location} now belongs to [{identity}] (was [{previous}])")
    return 0


def _recover(sink: TwoPhaseCommitSink[Any, Any, Any], ledger: CommitLedger, sink_id: str, *, dry_run: bool) -> int:
    rc = RecoveryCoordinator(sink, ledger, sink_id=sink_id)
    if dry_run:
        plan = rc.plan()
        print(f"sink {sink_id} on {sink.describe()}")
        print(f"  batches to finish:        {list(plan.batches_to_finish) or 'none'}")
        print(f"  transactions to commit:   {len(plan.transactions_to_commit)}")
        print(f"  orphans to roll back:     {len(plan.orphans_to_roll_back)}")
        return 0
    print(rc.run().summary())
    return 0
