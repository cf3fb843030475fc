"""What the operator's commands (status, recover, verify, metrics) share: the sink a checkpoint's query writes with,
built from the recorded writer options and the secrets given, and the checks that it is the recorded one; a failed check
raises :class:`CannotTell` (exit 3) before the target is read or anything is written."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import Any

from twopc import CommitLedger, ConfigurationError, TwoPhaseCommitDataSource, TwoPhaseCommitSink
from twopc.spi import TargetMismatchError
from twopc.spi.lease import TargetRecord, check_target
from twopc.spi.operations import load_object, open_store


class CannotTell(ConfigurationError):
    """The checkpoint is missing, holds no twopc ledger, or records another sink id, format or target
    than the options given (exit :data:`CANNOT_TELL`)."""


def sink_class(format_name: str) -> type[TwoPhaseCommitSink[Any, Any, Any]]:
    """The sink class of a data source name (``twopc-postgres``) or a ``module:SinkClass`` /
    ``module:DataSource`` path; ConfigurationError for an unknown format."""
    from twopc import sinks
    for ds in sinks.DATA_SOURCES:
        if ds.name() == format_name:
            return ds.sink_class
    if ":" in format_name:
        try:
            obj = load_object(format_name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ConfigurationError(f"sink format {format_name!r} cannot be imported: {type(exc).__name__}: "
                                     f"{exc}") from None
        if isinstance(obj, type) and issubclass(obj, TwoPhaseCommitDataSource):
            obj = obj.sink_class
        if isinstance(obj, type) and issubclass(obj, TwoPhaseCommitSink):
            return obj
    known = ", ".join(ds.name() for ds in sinks.DATA_SOURCES)
    raise ConfigurationError(f"unknown sink format {format_name!r}: use one of {known}, or module:SinkClass")


def build_sink(format_name: str, options: Mapping[str, str]) -> TwoPhaseCommitSink[Any, Any, Any]:
    """The sink of :func:`sink_class` built from writer options; ConfigurationError when the format is
    unknown or the sink refuses the options."""
    return sink_class(format_name).from_options(options)


def cli_options(pairs: Sequence[str], env_pairs: Sequence[str]) -> dict[str, str]:
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


def merged_options(record: TargetRecord | None, given: Mapping[str, str]) -> dict[str, str]:
    """The recorded writer options with those *given* in their place (keys compared case-insensitively)."""
    replaced = {k.lower() for k in given}
    recorded = record.options if record is not None and record.options else {}
    return {**{k: v for k, v in recorded.items() if k.lower() not in replaced}, **given}


def recorded_sink_id(ledger: CommitLedger, checkpoint: str) -> str:
    """The sink id *checkpoint* records; CannotTell without a twopc ledger there."""
    sink_id = ledger.recorded_sink_id()
    if sink_id:
        return sink_id
    if open_store(checkpoint, read_only=True).read("metadata") is not None:
        raise CannotTell(f"{checkpoint} is a Spark checkpoint without a twopc ledger (no {ledger.location}/"
                          f"sink.json): its query does not write with a twopc sink, or has not planned its first "
                          f"write yet. Check the path: give the checkpointLocation of the query that writes with "
                          f"twopc")
    local_missing = ":" not in checkpoint.split("/", 1)[0] and not os.path.exists(checkpoint)
    raise CannotTell(f"there is no twopc checkpoint at {checkpoint} (no {ledger.location}/sink.json"
                      + (f"; {checkpoint} does not exist" if local_missing else "")
                      + "): check the path, and give the checkpointLocation of the query that writes with twopc")


def open_checkpoint(checkpoint: str, given_sink_id: str | None) -> tuple[CommitLedger, str]:
    """The ledger at *checkpoint*, read only, and its sink id; CannotTell without a ledger or when
    *given_sink_id* (``--sink-id``) is another sink's."""
    reader = CommitLedger(checkpoint, read_only=True)
    sink_id = recorded_sink_id(reader, checkpoint)
    if given_sink_id and given_sink_id != sink_id:
        raise CannotTell(f"checkpoint {checkpoint} belongs to sink id {sink_id!r}, but --sink-id {given_sink_id!r} "
                         f"was given: drop --sink-id (the checkpoint records it), or give the checkpoint of sink "
                         f"id {given_sink_id!r}")
    return reader, sink_id


def recorded_sink(args: argparse.Namespace, checkpoint: str,
                  record: TargetRecord | None) -> tuple[TwoPhaseCommitSink[Any, Any, Any], dict[str, str]]:
    """The sink *checkpoint*'s query writes with and its options: the recorded format and options with
    ``--format``/``--option``/``--option-env`` in their place. CannotTell when ``--format`` names
    another sink; ConfigurationError for a missing or unknown format or refused options."""
    options = merged_options(record, cli_options(args.option, args.option_env))
    return build_sink(sink_format(args.format, checkpoint, record), options), options


def sink_format(given: str | None, checkpoint: str, record: TargetRecord | None) -> str:
    """The format to build the sink with: *given* (``--format``, which must be the recorded sink's), or
    the recorded one; CannotTell or ConfigurationError as :func:`recorded_sink`."""
    recorded = record.data_source if record is not None else None
    if given is None:
        if record is None or not (record.data_source or record.sink_class):
            raise ConfigurationError(
                f"--format is required: checkpoint {checkpoint} does not record the format of its query (written "
                f"by an older twopc, or by a sink that does not tell its target). Give the data source name the "
                f"query writes with (twopc-postgres, twopc-jdbc, ...) or module:SinkClass")
        from twopc import sinks
        if recorded is not None and any(ds.name() == recorded for ds in sinks.DATA_SOURCES):
            return recorded
        return record.sink_class or recorded or ""
    given_class = sink_class(given)
    if record is None or not (record.data_source or record.sink_class) or given == recorded:
        return given
    recorded_class = _recorded_class(record)
    if recorded_class is None or given_class is recorded_class:  # None: defined where it cannot be imported now
        return given
    raise CannotTell(
        f"checkpoint {checkpoint} was written with format {recorded or record.sink_class!r}"
        + (f" ({record.sink_class})" if recorded and record.sink_class else "")
        + f", but --format {given!r} was given: drop --format (the checkpoint records it), or give the checkpoint "
          f"of the query that writes with {given!r}")


def _recorded_class(record: TargetRecord) -> type[TwoPhaseCommitSink[Any, Any, Any]] | None:
    for candidate in (record.data_source, record.sink_class):
        if candidate:
            try:
                return sink_class(candidate)
            except ConfigurationError:
                continue
    return None


def check_recorded_target(sink: TwoPhaseCommitSink[Any, Any, Any], reader: CommitLedger, sink_id: str, checkpoint: str,
                  record: TargetRecord | None) -> None:
    """Raise CannotTell when *sink*'s target is not the one *checkpoint* records, compared as a write
    compares them (by what the servers say they are, so an alias is the same target). Records nothing."""
    try:
        check_target(sink, reader, sink_id, record=False)
    except TargetMismatchError as exc:
        recorded = ", ".join(sorted(record.options or {})) if record is not None else ""
        hint = (f" To reach the recorded target, give only the secrets: the checkpoint records the options "
                f"{recorded}." if recorded else "")
        raise CannotTell(f"{exc}{hint}") from exc
