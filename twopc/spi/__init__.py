"""twopc's service provider interface for sink authors: what a sink imports beyond :mod:`twopc`.

A pipeline needs only :mod:`twopc`'s public names. A sink (the built-in ones in ``twopc.sinks``, or your own) imports
the rest from here, never from a private ``twopc._*`` module (``make lint`` enforces it), so that twopc's modules can
move without breaking it. Three narrower modules serve twopc's own packages: :mod:`twopc.spi.lease` (the ledger and
lease a SQL sink keeps in its server), :mod:`twopc.spi.runtime` (the Spark writers, the composite sink, the
protocol's records) and :mod:`twopc.spi.operations` (the operator's commands).

- The optional capabilities a sink may have beyond :class:`~twopc.TwoPhaseCommitSink` (subclass each one it
  implements; its methods have defaults): :class:`WriteSetup` (the kind of write, validation), :class:`BatchCommit`
  (one commit per batch), :class:`DecisionHook`, :class:`Inspectable` (what ``twopc status`` shows),
  :class:`MarkerPurge`, :class:`NamedTarget` (the target's name, reopening it, the sink id's owner),
  :class:`LedgerHost` (a ledger kept in the target); :func:`capability` gives a sink's capability, or what the
  runtime does without it.
- The finer exceptions a sink raises: :class:`MissingOptionError`, :class:`SchemaMismatchError`,
  :class:`TargetConfigurationError`, :class:`ConcurrentWriterError`, :class:`TargetMismatchError` (under
  ``ConfigurationError``); :class:`HandleError`, :class:`UnknownHandleKindError`, :class:`HandleVersionError`;
  :class:`SinkUnavailableError`, :class:`CommitPendingError` (under ``SinkError``); :class:`SourceError`,
  :class:`BatchAbortedError`, :class:`ProtocolError`; and :func:`redact`, which takes credentials out of a URL before
  it reaches a message.
- What a sink reports to ``twopc status``: :class:`PreparedDetail`, :class:`Headroom`; the
  owner of a sink id it records in its target: :class:`OwnerRecord`.
- Plumbing: :func:`require` (import a backend's driver, or name the extra to install), :func:`option` (an option,
  case-insensitively), :func:`validate_sink_id`, :func:`make_folder`.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from .._errors import (
        BatchAbortedError,
        CommitPendingError,
        ConcurrentWriterError,
        HandleError,
        HandleVersionError,
        MissingOptionError,
        ProtocolError,
        SchemaMismatchError,
        SinkUnavailableError,
        SourceError,
        TargetConfigurationError,
        TargetMismatchError,
        UnknownHandleKindError,
        redact,
    )
    from .._extras import require
    from .._folders import make_folder
    from .._inspect import Headroom, PreparedDetail
    from .._runtime_options import option
    from .._sink import (
        BatchCommit,
        DecisionHook,
        Inspectable,
        LedgerHost,
        MarkerPurge,
        NamedTarget,
        WriteSetup,
        capability,
    )
    from .._sink_id_record import OwnerRecord
    from .._xid import validate_sink_id

__all__ = ["BatchAbortedError", "BatchCommit", "CommitPendingError", "ConcurrentWriterError", "DecisionHook",
           "HandleError", "HandleVersionError", "Headroom", "Inspectable", "LedgerHost", "MarkerPurge",
           "MissingOptionError", "NamedTarget", "OwnerRecord", "PreparedDetail", "ProtocolError", "SchemaMismatchError",
           "SinkUnavailableError", "SourceError", "TargetConfigurationError", "TargetMismatchError",
           "UnknownHandleKindError", "WriteSetup", "capability", "make_folder", "option", "redact", "require",
           "validate_sink_id"]

#: Every name loads on first use (see :mod:`twopc._lazy`): a sink imports this package in every
#: Spark Python worker of a write, which then loads only the modules of the names it reads.
__getattr__, __dir__ = _lazy_exports(__name__, {
    **dict.fromkeys(("BatchAbortedError", "CommitPendingError", "ConcurrentWriterError", "HandleError",
                     "HandleVersionError", "MissingOptionError", "ProtocolError", "SchemaMismatchError",
                     "SinkUnavailableError", "SourceError", "TargetConfigurationError", "TargetMismatchError",
                     "UnknownHandleKindError", "redact"), ".._errors"),
    **dict.fromkeys(("BatchCommit", "DecisionHook", "Inspectable", "LedgerHost", "MarkerPurge", "NamedTarget",
                     "WriteSetup", "capability"), ".._sink"),
    **dict.fromkeys(("Headroom", "PreparedDetail"), ".._inspect"),
    **dict.fromkeys(("validate_sink_id",), ".._xid"),
    "OwnerRecord": ".._sink_id_record", "make_folder": ".._folders", "option": ".._runtime_options",
    "require": ".._extras",
})
