"""One query per sink id, recorded in the target. Recovery rolls back every prepared transaction
of its sink id its own ledger does not decide, so two checkpoints with one ``sinkId`` would undo
each other's work. SQL sinks lease the sink id (:mod:`twopc._target`); the others keep an
*owner record* (:meth:`~twopc.spi.NamedTarget.claim_sink_id`) that refuses another checkpoint
and outlives the query on purpose (only its checkpoint can finish its decided batches)."""

from __future__ import annotations

import contextlib
import contextvars
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._errors import ConcurrentWriterError
from ._runtime_options import default_sink_id
from ._sink import AnySink, NamedTarget, capability
from .ledger._target_protocol import Lease, TargetLedger, target_ledger_of

if TYPE_CHECKING:
    from .ledger._ledger import CommitLedger  # the driver's: a task only marks itself (runtime_task)

__all__ = ["check_target", "checkpoint_label", "claim_sink_id", "claim_writer", "hold_for_prepare", "runtime_task"]


def checkpoint_label(location: str) -> str:
    """*location* without user info or trailing ``/``: what an owner record holds."""
    parts = urllib.parse.urlsplit(location)
    if parts.scheme and "@" in parts.netloc:
        parts = parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1])
        location = urllib.parse.urlunsplit(parts)
    return location.rstrip("/") or location


def claim_sink_id(sink: AnySink, sink_id: str, checkpoint_location: str) -> None:
    """Record *checkpoint_location*'s query as owner of *sink_id* in the target, or refuse the write.
    Raises ConcurrentWriterError: another checkpoint is recorded (naming both, the fix, and how to
    retire the other record).
    Raises SinkError / SinkUnavailableError: the target failed."""
    mine = checkpoint_label(checkpoint_location)
    target = capability(sink, NamedTarget)
    if (other := target.claim_sink_id(sink_id, mine)) is None:
        return
    from ._advice import command  # a refusal's advice: a claim that succeeds needs none
    raise ConcurrentWriterError(
        f"sink id {sink_id!r} on {target.target_identity() or sink.describe()} belongs to the query whose "
        f"checkpoint is {other.owner}, and this write's checkpoint is {mine}: two queries with one sink id "
        f"would roll back each other's transactions, so nothing was written. Give this write its own sinkId "
        f"(or leave sinkId unset: it then derives from the checkpoint). If the other query is retired for "
        f"good, finish its batches ({command('recover', other.owner)}), then delete its record: {other.remove}")


@dataclass
class _Held:
    """A sink id's lease held by this process for the coordinators of one checkpoint."""

    lease: Lease
    owner: str | None  # None: taken by a prepare; the process's first coordinator adopts it
    users: int


_HELD: dict[tuple[str, str], _Held] = {}
_HELD_LOCK = threading.Lock()
#: claims a garbage collection let go of while _HELD_LOCK was taken, released by its holder
_DEFERRED: list[SinkIdClaim] = []


class SinkIdClaim:
    """A writer's hold on its sink id's lease (:func:`claim_writer`), until :meth:`release`."""

    def __init__(self, backend: TargetLedger, sink_id: str) -> None:
        self._backend = backend
        self._key = (backend.location, sink_id)
        self._released = False

    def release(self) -> None:
        """Give this hold up (idempotent, never raises); the lease goes with the process's last holder."""
        with _HELD_LOCK:
            lease = self._let_go()
        if lease is not None:
            self._backend.release(lease)
        _release_deferred()

    def release_collected(self) -> None:
        """:meth:`release` from a garbage collection, which may run inside :func:`claim_writer` while it
        holds ``_HELD_LOCK``: it never waits for the lock, leaving the release to its holder."""
        _DEFERRED.append(self)
        if _HELD_LOCK.acquire(blocking=False):  # free: nobody would take the release up
            _HELD_LOCK.release()
            _release_deferred()

    def _let_go(self) -> Lease | None:
        """Under ``_HELD_LOCK``: the lease to release when this was the last hold."""
        released, self._released = self._released, True
        if released or (held := _HELD.get(self._key)) is None:
            return None
        held.users -= 1
        return _HELD.pop(self._key).lease if held.users <= 0 else None


def _release_deferred() -> None:
    while _DEFERRED:
        try:
            claim = _DEFERRED.pop()
        except IndexError:  # another thread took the last one
            return
        claim.release()


@contextlib.contextmanager
def _holding() -> Iterator[None]:
    """``_HELD_LOCK`` for the block, then the releases deferred meanwhile."""
    try:
        with _HELD_LOCK:
            yield
    finally:
        _release_deferred()


def check_target(sink: AnySink, ledger: CommitLedger, sink_id: str, *, record: bool) -> None:
    """Refuse *sink*'s target if the checkpoint belongs to another; with *record*, record it the first
    time (:meth:`CommitLedger.bind_target`). Every writer passes here before touching the target:
    recovery against the wrong one would call the decided transactions lost.
    Raises TargetMismatchError: the checkpoint belongs to another target.
    Raises LedgerError: the checkpoint cannot be read or written."""
    target = capability(sink, NamedTarget)
    if not ledger.in_target and (identity := target.target_identity()) is not None:
        ledger.bind_target(identity, sink_id, record=record, instance=target.target_instance())


def claim_writer(sink: AnySink, ledger: CommitLedger, sink_id: str) -> SinkIdClaim | None:
    """Claim *sink_id* for a writer before it rolls anything back: a SQL sink's lease (returned: release it when
    done) or an owner record. Nothing for a sink id derived from the checkpoint or a ledger kept in the target.
    Raises ConcurrentWriterError: another writer (or a coordinator of this process for another checkpoint) has the
    sink id.
    Raises SinkError / SinkUnavailableError: the target failed."""
    if ledger.in_target or sink_id == default_sink_id(ledger.checkpoint_location):
        return None
    if (backend := target_ledger_of(sink)) is None:
        claim_sink_id(sink, sink_id, ledger.checkpoint_location)
        return None
    mine = checkpoint_label(ledger.checkpoint_location)
    key = (backend.location, sink_id)
    with _holding():
        held = _HELD.get(key)
        if held is not None and held.owner is None:  # taken by this process's first prepare
            held.owner = mine
        if held is not None and held.owner != mine:
            raise ConcurrentWriterError(
                f"sink id {sink_id!r} on {backend.location} is held by a writer of this process whose checkpoint "
                f"is {held.owner}, and this writer's checkpoint is {mine}: two writers with one sink id would roll "
                f"back each other's transactions, so nothing was touched. Give each writer its own sink id, or "
                f"close the other writer's coordinator first")
        if held is None:
            _HELD[key] = held = _Held(backend.acquire(sink_id), mine, 0)
        held.users += 1
    return SinkIdClaim(backend, sink_id)


_IN_RUNTIME_TASK: contextvars.ContextVar[bool] = contextvars.ContextVar("twopc_runtime_task", default=False)


@contextlib.contextmanager
def runtime_task() -> Iterator[None]:
    """Mark the block as a twopc runtime task, whose driver holds the claim (:func:`hold_for_prepare`)."""
    token = _IN_RUNTIME_TASK.set(True)
    try:
        yield
    finally:
        _IN_RUNTIME_TASK.reset(token)


def hold_for_prepare(backend: TargetLedger, sink_id: str) -> None:
    """Before a core-API writer outside the runtime prepares, hold the free lease of *sink_id* for
    this process (adopted by its first :func:`claim_writer`), so another writer is refused instead
    of rolling this transaction back as an orphan. A lease held elsewhere is left alone.
    Raises SinkError / SinkUnavailableError: the target failed."""
    if _IN_RUNTIME_TASK.get():
        return
    key = (backend.location, sink_id)
    with _holding():
        if key in _HELD:
            return
    try:
        lease = backend.acquire(sink_id)
    except ConcurrentWriterError:
        return
    with _holding():
        if key in _HELD:  # another thread of this process took it meanwhile
            backend.release(lease)
            return
        _HELD[key] = _Held(lease, None, 0)
