"""Runtime options shared by every twopc data source."""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._errors import ConfigurationError, MissingOptionError
from ._xid import validate_sink_id

if TYPE_CHECKING:
    from ._retry import CommitRetry

__all__ = ["EPHEMERAL_PREFIX", "RUNTIME_OPTION_NAMES", "RuntimeOptions", "default_sink_id", "ephemeral_sink_id",
           "ephemeral_started", "option"]

#: Options consumed by the runtime, as the README spells them; everything else is the sink's.
RUNTIME_OPTION_NAMES: tuple[str, ...] = (
    "checkpointLocation", "sinkId", "txnAppId", "txnVersion", "minBatchesToRetain", "metricsPort",
    "metricsHost", "maxConcurrentTransactions", "commitRetries", "commitRetryBackoff")
#: :data:`RUNTIME_OPTION_NAMES` lower-cased (Spark lower-cases option keys).
RUNTIME_KEYS = frozenset(name.lower() for name in RUNTIME_OPTION_NAMES)


def option(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    """Look up *name* case-insensitively (Spark lower-cases option keys)."""
    lowered = name.lower()
    return next((v for k, v in options.items() if k.lower() == lowered), default)


def sink_options(options: Mapping[str, str]) -> dict[str, str]:
    """*options* without the runtime's: what the sink is built from."""
    return {k: v for k, v in options.items() if k.lower() not in RUNTIME_KEYS}


def default_sink_id(checkpoint_location: str) -> str:
    """A stable sink id derived from the checkpoint location."""
    loc = checkpoint_location.rstrip("/")
    if "://" not in loc:
        loc = os.path.abspath(loc)
    return "q" + hashlib.sha256(loc.encode("utf-8")).hexdigest()[:16]


#: sink ids of writes without a checkpoint and without txnAppId (:func:`ephemeral_sink_id`)
EPHEMERAL_PREFIX = "eph-"


def ephemeral_sink_id() -> str:
    """A fresh sink id for a write without checkpointLocation: ``eph-`` + start time (8 hex unix
    seconds) + 8 random hex, so an abandoned one is told by age."""
    return f"{EPHEMERAL_PREFIX}{int(time.time()):08x}{secrets.token_hex(4)}"


def ephemeral_started(sink_id: str) -> float | None:
    """The start time in an :func:`ephemeral_sink_id`, else None."""
    m = re.fullmatch(r"eph-([0-9a-f]{8})[0-9a-f]{8}", sink_id)
    return float(int(m.group(1), 16)) if m else None


@dataclass(frozen=True)
class RuntimeOptions:
    """The options every twopc data source understands.

    - ``checkpointLocation`` (required): where the ledger lives; streaming queries pass theirs.
    - ``sinkId`` (alias ``txnAppId``): defaults to an id derived from the checkpoint.
    - ``txnVersion``: batch writes only, required; a write whose version is <= the last committed
      one writes nothing (Delta's model). An ISO date ``2026-11-22`` is ``20261122`` (greater than
      every run counter below 10000101: keep one form per job); an ISO timestamp is refused.
    - ``minBatchesToRetain``: ledger records kept, default 100.
    - ``commitRetries`` (default 3) and ``commitRetryBackoff`` (seconds, default 1, doubled per retry): how often an
      unanswered commit is asked again before :class:`~twopc.spi.CommitPendingError`."""

    checkpoint_location: str
    sink_id: str | None
    txn_version: int | None
    keep_last: int
    ephemeral: bool = False  # no checkpointLocation: a temporary ledger (atomic sinks only)
    commit_retry: tuple[int, float] | None = None  # as given (None: the defaults); see retry
    in_target: bool = False  # no checkpointLocation: the ledger lives in the target (twopc._target)

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool,
              ephemeral_location: str | None = None) -> RuntimeOptions:
        """Parse the runtime options. *ephemeral_location*: a temporary ledger folder for a batch write
        without ``checkpointLocation`` (atomic sinks); ``txnVersion`` then defaults to 0.
        Raises MissingOptionError: ``checkpointLocation`` (or a batch write's ``txnVersion``) is missing.
        Raises ConfigurationError: an option is invalid."""
        loc = option(options, "checkpointLocation")
        ephemeral = None if loc or streaming else ephemeral_location
        if not loc and ephemeral is None:
            how = ('df.writeStream.option("checkpointLocation", "/durable/path/query-name"), or set the '
                   "session's spark.sql.streaming.checkpointLocation before the query starts (on Spark Connect: "
                   'before registering the twopc data sources) and name the query (.queryName("query-name"))'
                   if streaming else 'df.write.option("checkpointLocation", "/durable/path/job-name")')
            raise MissingOptionError(f"twopc needs a checkpointLocation to record its commit decisions durably: add "
                                     f"{how}")
        if (sink_id := option(options, "sinkId") or option(options, "txnAppId")) is not None:
            validate_sink_id(sink_id)
        version_text = option(options, "txnVersion")
        if ephemeral is not None:
            if version_text is not None and sink_id is None:
                raise ConfigurationError(
                    "txnVersion without checkpointLocation needs txnAppId: the target remembers "
                    "which (txnAppId, txnVersion) it committed. Add .option(\"txnAppId\", \"job-name\")")
            return cls(ephemeral, sink_id, _parse_version(version_text) if version_text else 0,
                       1, ephemeral=True, commit_retry=_retry(options))
        if version_text is None and not streaming:
            raise MissingOptionError("a twopc batch write needs option txnVersion: a number that identifies this run "
                                     "of the job (e.g. the date, 2026-11-22 or 20261122, or a run counter). Rerunning "
                                     'with the same or a lower version writes nothing. Add .option("txnVersion", N)')
        version = _parse_version(version_text) if version_text is not None else None
        assert loc is not None  # refused above unless ephemeral
        keep = option(options, "minBatchesToRetain", "100") or "100"
        if not keep.isdigit() or int(keep) < 1:
            raise ConfigurationError(f"minBatchesToRetain must be an integer >= 1, got {keep!r}")
        return cls(loc, sink_id, version, int(keep), commit_retry=_retry(options))

    @property
    def retry(self) -> CommitRetry:
        """The unanswered-commit retry policy."""
        from ._retry import CommitRetry  # the committing worker's: a task never retries a commit
        return CommitRetry(*self.commit_retry) if self.commit_retry is not None else CommitRetry()


def _retry(options: Mapping[str, str]) -> tuple[int, float] | None:
    """``commitRetries`` and ``commitRetryBackoff``, checked (None: neither given).
    Raises ConfigurationError: see :meth:`~twopc.spi.runtime.CommitRetry.parse`."""
    from ._retry import CommitRetry  # as in RuntimeOptions.retry: planning checks them
    retries, backoff = option(options, "commitRetries"), option(options, "commitRetryBackoff")
    if retries is None and backoff is None:
        return None
    policy = CommitRetry.parse(retries, backoff)
    return policy.retries, policy.backoff


#: The largest txnVersion: the batch id is a signed 64-bit integer everywhere.
MAX_TXN_VERSION = 2**63 - 1


_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_ISO_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:?\d{2}.*")


def _parse_version(text: str) -> int:
    """``txnVersion``: a non-negative integer, or an ISO date ``YYYY-MM-DD`` as ``YYYYMMDD``.
    Raises ConfigurationError: anything else; a timestamp's message names the number to give."""
    t = text.strip()
    if _ISO_DATE.fullmatch(t):
        try:
            day = datetime.date.fromisoformat(t)
        except ValueError:
            raise ConfigurationError(f"txnVersion {t!r} is not a date of the calendar (YYYY-MM-DD); nothing was "
                                     f"written") from None
        return day.year * 10_000 + day.month * 100 + day.day
    if _ISO_TIMESTAMP.fullmatch(t):
        raise ConfigurationError(_timestamp_refusal(t))
    if not t.isdigit():
        raise ConfigurationError(f"txnVersion must be a non-negative integer or an ISO date (2026-11-22, which is "
                                 f"20261122), got {text!r}")
    version = int(t)
    if version > MAX_TXN_VERSION:
        raise ConfigurationError(
            f"txnVersion {t[:40]} is too big: it is stored as the batch id, a 64-bit integer "
            f"(BIGINT), so it must be at most {MAX_TXN_VERSION}. Use a smaller number, e.g. the date "
            f"as 20261122 or a run counter; nothing was written")
    return version


def _timestamp_refusal(text: str) -> str:
    """Why an ISO timestamp is not a ``txnVersion``, and the number to give instead."""
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        number = "YYYYMMDDhhmmss"
    else:
        if when.tzinfo is not None:
            when = when.astimezone(datetime.UTC)
        number = when.strftime("%Y%m%d%H%M%S") + (" (UTC)" if when.tzinfo is not None else "")
    return (f"txnVersion {text[:40]!r} is a timestamp; twopc takes a date (2026-11-22, the number 20261122) or "
            f"a non-negative integer. For several runs a day give the number {number} as txnVersion, in that "
            f"form in every run of the job: a date's number (8 digits) is smaller than every such number, so "
            f"mixing the two forms would let an older run count as newer. Nothing was written")
