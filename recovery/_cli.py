"""``twopc status`` / ``twopc recover`` (also ``python -m twopc.recovery``): inspect a checkpoint's
sink and run recovery by hand; ``verify`` and ``metrics`` are registered here too.

Both read the checkpoint's sink id and ``twopc/target.json`` (target, format, credential-free
writer options), so the operator gives only the secrets. A missing checkpoint, one without a
ledger, or one of another sink id, format or target is refused with exit 3 (:data:`CANNOT_TELL`)
before the target is read; a status never writes (its ledger is opened read only)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from twopc import CommitLedger, ConfigurationError, RecoveryCoordinator, TwoPCError, TwoPhaseCommitSink, sink_status
from twopc.spi import NamedTarget, capability
from twopc.spi.lease import TargetLedger, open_target_ledger, resolve_abandoned, target_ledger_of
from twopc.spi.operations import BatchState, configure_cli_logging, log_event

from . import _metrics_cli
from ._common import CannotTell, build_sink, check_recorded_target, cli_options, open_checkpoint, recorded_sink
from ._verify_cli import add_verify_parser, run_verify

__all__ = ["CANNOT_TELL", "ERROR", "NEEDS_OPERATOR", "OK", "build_sink", "main", "parse_command"]

#: Exit codes. OK: done (status: nothing needs an operator).
OK = 0
#: status found something that needs an operator.
NEEDS_OPERATOR = 1
#: an error (the target failed, a wrong option; argparse's code for a wrong command line too).
ERROR = 2
#: nothing can be told: the checkpoint is missing, holds no twopc ledger, or belongs to another
#: sink id, format or target than the options given.
CANNOT_TELL = 3

_EXIT_CODES = ("exit codes: 0 done (status: nothing needs an operator); 1 status found something that needs "
               "an operator; 2 an error (the target failed, a wrong option or command line); 3 nothing can be "
               "told: the checkpoint does not exist, holds no twopc ledger, or belongs to another sink id, format "
               "or target than the options given")


_COMMANDS = ("status", "recover", "verify", "metrics")


def _pair(form: str) -> Callable[[str], str]:
    """An argparse type: the text if it is *form* (``key=value``); the refusal never shows the text,
    which may be a password."""
    def check(text: str) -> str:
        key, sep, _ = text.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"takes {form} (no key and '=' in what was given)")
        return text
    return check


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("location", nargs="?", metavar="CHECKPOINT", help="the query's checkpointLocation (the "
                        "same as --checkpoint)")
    common.add_argument("--checkpoint", help="the query's checkpointLocation; without it, the writes without a "
                                             "checkpoint whose ledger is in the target (--format and --option "
                                             "url=... name the target)")
    common.add_argument("--format", help="twopc-postgres, twopc-file, ... or module:SinkClass (default: the format "
                                         "the checkpoint records; required when it records none)")
    common.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", type=_pair("key=value"),
                        help="a writer option of the sink (repeatable); it replaces the one the checkpoint "
                             "records, which is every option but the secrets")
    common.add_argument("--option-env", action="append", default=[], metavar="KEY=ENVVAR", type=_pair("key=ENVVAR"),
                        help="a writer option read from an environment variable (for passwords)")
    common.add_argument("--sink-id", help="the sink id the checkpoint records (default); another one is refused")
    parser = argparse.ArgumentParser(
        prog="twopc",
        description="Operate a twopc sink: `status` shows what is unsettled (read only), `recover` finishes "
                    "decided batches and rolls back orphaned prepared transactions, `verify` checks that the target "
                    "holds what its source or ledger says (read only; see `twopc verify --help`), `metrics` serves a "
                    "checkpoint's in-doubt figures to Prometheus while its query is down. They read the "
                    "format, the target and the writer options (without secrets) the checkpoint records: give the "
                    "secrets "
                    "with --option-env. Without a command, `recover`; `python -m twopc.recovery` is the same.",
        epilog=_EXIT_CODES)
    sub = parser.add_subparsers(dest="command", required=True)
    status = sub.add_parser("status", parents=[common], epilog=_EXIT_CODES,
                            help="show every unsettled transaction (read only: writes nothing)")
    status.add_argument("--json", action="store_true", help="print JSON for scripts")
    recover = sub.add_parser("recover", parents=[common], epilog=_EXIT_CODES, help="run recovery")
    recover.add_argument("--dry-run", action="store_true", help="only print what would be done")
    recover.add_argument("--accept-lost", type=int, metavar="BATCH",
                         help="mark a decided batch whose transactions were lost as done (after you "
                              "restored its rows by other means); for a write without a checkpoint, with "
                              "--sink-id naming it")
    recover.add_argument("--retarget", action="store_true",
                         help="move the checkpoint to the target the --format and --option name (a server "
                              "that moved with its data): refused while a decided batch waits in the old one")
    add_verify_parser(sub, common)
    _metrics_cli.add_parser(sub)
    return parser


def parse_command(argv: Sequence[str]) -> argparse.Namespace:
    """*argv* (after ``twopc``) as ``twopc`` reads it, ``recover`` when no command is given, with every
    check that needs no checkpoint and no target (twopc's suggested commands are tested against it).
    SystemExit as argparse's: exit 2 (:data:`ERROR`) with the message and usage, or 0 for ``--help``."""
    args_in = list(argv)
    if not args_in or (args_in[0] not in _COMMANDS and args_in[0] not in ("-h", "--help")):
        args_in = ["recover", *args_in]
    parser = _parser()
    args = parser.parse_args(args_in)
    if (problem := _wrong_combination(args)) is not None:
        parser.error(problem)
    return args


def _wrong_combination(args: argparse.Namespace) -> str | None:
    if args.command == "metrics":
        return None
    if args.location and args.checkpoint and args.location != args.checkpoint:
        return f"two checkpoints given: {args.location} and --checkpoint {args.checkpoint}: give one"
    if args.command not in ("status", "recover") or args.checkpoint or args.location:
        return None
    if not args.format:
        return ("give the checkpoint (the query's checkpointLocation), or --format and --option url=... (and "
                "dbtable=...) for the writes without a checkpoint")
    if args.command == "recover" and (args.dry_run or args.retarget):
        return "--dry-run and --retarget need the checkpoint"
    if args.command == "recover" and args.accept_lost is not None and not args.sink_id:
        return "--accept-lost without a checkpoint needs --sink-id: the sink id of the write the error named"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``twopc status`` / ``twopc recover``; the exit code: :data:`OK`, :data:`NEEDS_OPERATOR`,
    :data:`ERROR` or :data:`CANNOT_TELL`."""
    args = parse_command(sys.argv[1:] if argv is None else argv)
    configure_cli_logging()
    try:
        if args.command == "metrics":
            return _metrics_cli.run(args)
        checkpoint = args.checkpoint or args.location
        if args.command == "verify":
            return run_verify(args, checkpoint)
        return _checkpoint_form(args, checkpoint) if checkpoint else _target_form(args)
    except TwoPCError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return CANNOT_TELL if isinstance(exc, CannotTell) else ERROR


def _checkpoint_form(args: argparse.Namespace, checkpoint: str) -> int:
    """``status`` / ``recover`` of a checkpoint's sink, from its record and the options given."""
    reader, sink_id = open_checkpoint(checkpoint, args.sink_id)
    if args.command == "recover" and args.accept_lost is not None:
        return _accept_lost(CommitLedger(checkpoint), args.accept_lost)
    record = reader.target_record()
    sink, options = recorded_sink(args, checkpoint, record)
    with sink:
        if args.command == "recover" and args.retarget:
            return _retarget(sink, CommitLedger(checkpoint), sink_id, options)
        check_recorded_target(sink, reader, sink_id, checkpoint, record)
        if args.command == "status":
            status = dataclasses.replace(sink_status(sink, reader, sink_id), how=_repeat_flags(args))
            print(json.dumps(status.to_json(), indent=1, sort_keys=True) if args.json else status.render())
            return NEEDS_OPERATOR if status.needs_operator else OK
        return _recover(sink, reader if args.dry_run else CommitLedger(checkpoint), sink_id, dry_run=args.dry_run)


def _target_form(args: argparse.Namespace) -> int:
    """``status`` / ``recover`` of the writes that keep their ledger in the target (no checkpoint):
    every writer recorded there, live or gone."""
    with build_sink(args.format, cli_options(args.option, args.option_env)) as sink:
        backend = target_ledger_of(sink)
        if backend is None:
            raise ConfigurationError(f"{sink.describe()} keeps no ledger in its target: give --checkpoint")
        if args.command == "recover":
            if args.accept_lost is not None:
                return _accept_lost_in_target(backend, args.sink_id, args.accept_lost)
            writers = backend.writers()
            done = resolve_abandoned(sink, backend)
            live = [w for w in writers if w not in done]
            print(f"{backend.location}: resolved {len(done)} write(s) whose driver is gone"
                  + (f" ({', '.join(done)})" if done else "") + f"; left {len(live)} running write(s) alone"
                  + (f" ({', '.join(live)})" if live else ""))
            return OK
        needs = False
        out = []
        for writer in backend.writers():
            with backend.take(writer) as free:
                status = dataclasses.replace(sink_status(sink, open_target_ledger(backend, writer), writer),
                                             how=_repeat_flags(args))
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
        return NEEDS_OPERATOR if needs else OK


def _repeat_flags(args: argparse.Namespace) -> tuple[str, ...]:
    """The arguments that reached the target, for the commands status advises (an ``--option`` holding
    a secret is left out: give it with ``--option-env``)."""
    from twopc.sinks._secrets import secret_guesses  # here: `twopc recover` on a file sink loads no driver code
    flags = ["--format", args.format] if args.format else []
    for pair in args.option:
        if not secret_guesses(dict([pair.partition("=")[::2]])):
            flags += ["--option", pair]
    return (*flags, *(x for pair in args.option_env for x in ("--option-env", pair)))


def _accept_lost_in_target(backend: TargetLedger, sink_id: str, batch: int) -> int:
    """``--accept-lost`` for a write whose ledger is in the target: only while its driver is gone (its
    lease is free), holding the lease meanwhile."""
    if sink_id not in backend.writers():
        raise ConfigurationError(f"{backend.location} records no write with sink id {sink_id!r}: give the sink id "
                                 f"the error named")
    with backend.take(sink_id) as free:
        if not free:
            raise ConfigurationError(f"the write with sink id {sink_id!r} is running (it holds its lease on "
                                     f"{backend.location}): wait until it has ended")
        return _accept_lost(open_target_ledger(backend, sink_id), batch)


def _accept_lost(ledger: CommitLedger, batch: int) -> int:
    if ledger.state(batch) is not BatchState.DECIDED:
        raise ConfigurationError(f"batch {batch} is not decided-and-unfinished")
    ledger.mark_committed(batch, summary={"accepted_lost_by_operator": True})
    log_event(logging.getLogger("twopc.recovery"), logging.WARNING, "lost_accepted",
              "twopc: batch %s marked done by an operator; its lost transactions will not be retried",
              batch, batch=batch)
    print(f"batch {batch} marked done; its lost transactions will not be retried")
    return OK


def _retarget(sink: TwoPhaseCommitSink[Any, Any, Any], ledger: CommitLedger, sink_id: str,
              options: Mapping[str, str]) -> int:
    named = capability(sink, NamedTarget)
    identity = named.target_identity()
    if identity is None:
        raise ConfigurationError(f"{sink.describe()} does not name its target: there is nothing to retarget")
    previous = ledger.retarget(identity, sink_id, instance=named.target_instance(),
                               options=named.reopen_options(options))
    log_event(logging.getLogger("twopc.recovery"), logging.WARNING, "retargeted",
              "twopc: checkpoint %s moved by an operator from [%s] to [%s]", ledger.checkpoint_location,
              previous, identity, previous=previous, target=identity)
    print(f"checkpoint {ledger.checkpoint_location} now belongs to [{identity}] (was [{previous}])")
    return OK


def _recover(sink: TwoPhaseCommitSink[Any, Any, Any], ledger: CommitLedger, sink_id: str, *, dry_run: bool) -> int:
    rc = RecoveryCoordinator(sink, ledger, sink_id=sink_id)
    if dry_run:
        plan = rc.plan()
        print(f"sink {sink_id} on {sink.describe()}")
        print(f"  batches to finish:        {list(plan.batches_to_finish) or 'none'}")
        print(f"  transactions to commit:   {len(plan.transactions_to_commit)}")
        print(f"  orphans to roll back:     {len(plan.orphans_to_roll_back)}")
        return OK
    print(rc.run().summary())
    return OK
