"""The twopc exception tree.

Every error twopc raises on purpose derives from :class:`TwoPCError`, so a caller can
catch the whole family with one clause, or a branch of it::

    TwoPCError
    ├── ConfigurationError          bad options or input; nothing was written
    │   ├── MissingOptionError      a required option is absent
    │   ├── MissingExtraError       a backend's driver is not installed (also an ImportError)
    │   ├── SchemaMismatchError     the DataFrame does not fit the target
    │   ├── TargetConfigurationError  the target is set up wrong (e.g. 2PC disabled)
    │   ├── ConcurrentWriterError   another writer has this sink id (lease or owner record)
    │   └── TargetMismatchError     the write's target is not the one its checkpoint belongs to
    ├── HandleError                 a serialized transaction handle cannot be read
    │   ├── UnknownHandleKindError  no handle type is registered for its kind
    │   └── HandleVersionError      written by a newer (or unsupported older) twopc
    ├── LedgerError                 the commit ledger cannot be read or written
    │   └── FencedError             a newer driver owns the checkpoint: this one may not decide
    ├── SinkError                   the target system failed an operation
    │   └── SinkUnavailableError    the target cannot be reached or refused login
    │       └── CommitPendingError  a decided commit got no answer, retries exhausted
    ├── SourceError                 a source cannot read what the offset log recorded
    ├── TransactionLostError        a decided transaction is neither prepared nor committed
    ├── BatchAbortedError           a task prepared after its job was aborted and rolled itself back
    └── ProtocolError               an invariant of the protocol was violated

Messages name the problem and the fix. They never contain credentials: sinks build
them from redacted URLs, and :func:`redact` strips any secret that a driver error
might echo back.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "BatchAbortedError",
    "CommitPendingError",
    "ConcurrentWriterError",
    "ConfigurationError",
    "FencedError",
    "HandleError",
    "HandleVersionError",
    "LedgerError",
    "MissingExtraError",
    "MissingOptionError",
    "ProtocolError",
    "SchemaMismatchError",
    "SinkError",
    "SinkUnavailableError",
    "SourceError",
    "TargetConfigurationError",
    "TargetMismatchError",
    "TransactionLostError",
    "TwoPCError",
    "UnknownHandleKindError",
    "redact",
]


class TwoPCError(Exception):
    """Base class of every error twopc raises on purpose."""


class ConfigurationError(TwoPCError):
    """Options or input are wrong. Raised before anything is written."""


class MissingOptionError(ConfigurationError):
    """A required option is missing."""


class MissingExtraError(ConfigurationError, ImportError):
    """A backend's Python driver is not installed (or fails to import).

    twopc's core needs only pyspark, pyarrow and SQLAlchemy; each backend's driver comes with
    an extra (``pip install 'pyspark-twopc[postgres]'``, ``[mysql]``, ``[redis]``, ``[all]``), and the
    message names the one to install. It is a :class:`ConfigurationError` (raised before
    anything is written, caught with the rest of the family) and an :class:`ImportError` (what
    Python code expects of a missing module). Raised by ``twopc._extras.require``.

    Attributes:
        name: the module that could not be imported (as on any ``ImportError``).
        extra: the extra that installs it.
        what: what needed it, e.g. ``"twopc-postgres"``.
    """

    def __init__(self, module_name: str, extra: str, what: str, reason: str = "which is not installed") -> None:
        super().__init__(
            f"{what} needs the Python module {module_name!r}, {reason}. "
            f"Install it with: pip install 'pyspark-twopc[{extra}]'",
            name=module_name,
        )
        self.extra = extra
        self.what = what
        self.reason = reason

    def __reduce__(self) -> tuple[type[MissingExtraError], tuple[str, str, str, str]]:
        # ImportError pickles as (message,): rebuild from the parts instead.
        return (type(self), (self.name or "", self.extra, self.what, self.reason))


class SchemaMismatchError(ConfigurationError):
    """The DataFrame's schema does not fit the target (missing table, columns, types)."""


class TargetConfigurationError(ConfigurationError):
    """The target system is configured in a way the guarantee cannot hold with."""


class ConcurrentWriterError(ConfigurationError):
    """Another writer has this sink id: a running one holds its lease on the target (SQL,
    see :mod:`twopc._target`), or the target's owner record names another checkpoint
    (Redis, files: see :mod:`twopc._sink_id_claim`). Two writers with one sink id would roll
    back each other's transactions. Refused before anything is written."""


class TargetMismatchError(ConfigurationError):
    """The write's target is not the one its checkpoint belongs to (``twopc/target.json``):
    another server, database or table, told apart by what the server says it is where the
    sink can ask (an alias of the same server is the same target). Its decided batches wait
    prepared in the recorded target, and its committed batch ids (``txnVersion``) describe
    that target only. Refused before anything is recorded; the message names both targets,
    the batches that wait, and the fix."""


class HandleError(TwoPCError):
    """A serialized transaction handle cannot be decoded."""


class UnknownHandleKindError(HandleError):
    """The envelope names a handle kind that no imported sink registered."""


class HandleVersionError(HandleError):
    """The envelope's version is newer than this twopc understands (or too old)."""


class LedgerError(TwoPCError):
    """The commit ledger in the checkpoint location cannot be read or written."""


class FencedError(LedgerError):
    """Another driver took over the checkpoint (a newer owner epoch is recorded): this driver
    is a zombie and may not record or act on a decision. Nothing of its batch is committed;
    the new owner finishes or rolls back what it left."""


class SinkError(TwoPCError):
    """The target system failed an operation of the protocol."""


class SinkUnavailableError(SinkError):
    """The target system cannot be reached, or refused the credentials."""


class CommitPendingError(SinkUnavailableError):
    """A commit got no answer (a timeout, a lost connection) on every retry.

    Nothing is lost and nothing is doubled: a decided batch stays decided in the ledger
    and its prepared transactions wait on the server; the next start of the query finishes
    it before anything else runs, or ``twopc recover`` does. The message names the
    server (without credentials), the batch, and those two ways.
    """


class SourceError(TwoPCError):
    """A source cannot read what Spark's offset log recorded for a micro-batch: entries of
    the range were deleted, or the stream was deleted or recreated. Reading on would lose
    or invent data, so the query stops; the message names the stream, the range and the fix."""


class TransactionLostError(TwoPCError):
    """A transaction that was decided for commit is neither prepared nor committed.

    Its effects are gone (e.g. an operator ran ``ROLLBACK PREPARED`` or the target lost
    data). twopc never papers over this: the batch stays decided-but-unfinished in the
    ledger and every retry raises again until an operator intervenes.
    """


class BatchAbortedError(TwoPCError):
    """A task prepared its transaction after the driver had aborted the task's batch (a
    sibling task failed first and Spark aborted the job while this one still ran: the
    *zombie-prepare window*). The task rolled its own prepared transaction back, so the
    failed job leaves nothing; the error only ends the task, whose job has already failed."""


class ProtocolError(TwoPCError):
    """An invariant of the two-phase-commit protocol was violated (a bug or tampering)."""


#: What to do about a damaged ledger record (the end of every such message).
DAMAGED_NEXT_STEP = (
    "the checkpoint is damaged (truncated, or edited by hand); nothing more was committed or rolled back. "
    "Next step: restore this file from a backup of the checkpoint (or repair the JSON by hand), then "
    "rerun. Do not delete the record: its batch may be partly committed, and without it twopc cannot "
    "finish it")


def redact(message: str, secrets: Iterable[str | None]) -> str:
    """Return *message* with every non-empty secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            message = message.replace(secret, "***")
    return message
