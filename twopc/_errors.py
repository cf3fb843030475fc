"""The twopc exception tree; messages name the problem and the fix, never a credential
(:func:`redact`)::

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
    └── ProtocolError               an invariant of the protocol was violated"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["BatchAbortedError", "CommitPendingError", "ConcurrentWriterError", "ConfigurationError", "FencedError",
           "HandleError", "HandleVersionError", "LedgerError", "MissingExtraError", "MissingOptionError",
           "ProtocolError", "SchemaMismatchError", "SinkError", "SinkUnavailableError", "SourceError",
           "TargetConfigurationError", "TargetMismatchError", "TransactionLostError", "TwoPCError",
           "UnknownHandleKindError", "redact"]


class TwoPCError(Exception):
    """Base class of every error twopc raises on purpose."""


class ConfigurationError(TwoPCError):
    """Options or input are wrong. Raised before anything is written."""


class MissingOptionError(ConfigurationError):
    """A required option is missing."""


class MissingExtraError(ConfigurationError, ImportError):
    """A backend's Python driver is not installed (or fails to import); the message names the pip
    extra. Attributes: ``name`` (the module), ``extra``, ``what`` (e.g. ``"twopc-postgres"``)."""

    def __init__(self, module_name: str, extra: str, what: str, reason: str = "which is not installed") -> None:
        super().__init__(f"{what} needs the Python module {module_name!r}, {reason}. Install it with: pip install "
                         f"'pyspark-twopc[{extra}]'", name=module_name)
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
    """Another writer has this sink id (its lease, or the target's owner record): they would roll
    back each other's transactions."""


class TargetMismatchError(ConfigurationError):
    """The write's target is not the one its checkpoint records (where its decided batches wait)."""


class HandleError(TwoPCError):
    """A serialized transaction handle cannot be decoded."""


class UnknownHandleKindError(HandleError):
    """The envelope names a handle kind that no imported sink registered."""


class HandleVersionError(HandleError):
    """The envelope's version is newer than this twopc understands (or too old)."""


class LedgerError(TwoPCError):
    """The commit ledger in the checkpoint location cannot be read or written."""


class FencedError(LedgerError):
    """A newer owner epoch took the checkpoint over: this driver decides nothing more; the new owner
    finishes what it left."""


class SinkError(TwoPCError):
    """The target system failed an operation of the protocol."""


class SinkUnavailableError(SinkError):
    """The target system cannot be reached, or refused the credentials."""


class CommitPendingError(SinkUnavailableError):
    """A decided commit got no answer on every retry: nothing is lost; the next start (or ``twopc
    recover``) finishes it."""


class SourceError(TwoPCError):
    """A source cannot read what Spark's offset log recorded (deleted entries, recreated stream)."""


class TransactionLostError(TwoPCError):
    """A decided transaction is neither prepared nor committed: the batch stays decided and every
    retry raises until an operator acts."""


class BatchAbortedError(TwoPCError):
    """A task prepared after its batch was aborted (*zombie-prepare window*) and rolled it back."""


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
