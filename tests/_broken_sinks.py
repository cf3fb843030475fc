"""Deliberately broken sinks, each a FileSink with one defect, for proving that the
conformance kit (``twopc.testing``) fails them. Importable by path, like any sink the kit
runs (the kit pickles them and can run them in other processes)."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from twopc import CommitOutcome, CommitShape
from twopc.sinks import FileHandle, FileSink
from twopc.spi import SinkUnavailableError, option
from twopc.testing import SinkHarness

from ._filesink_helpers import assert_nothing_left, committed_ids

#: The password of the sinks that take one (their failure messages must never show it; the
#: plain file sink refuses an option it does not know, so the others get none).
SECRET = "s3cret-Pa55word"


class CommitNotIdempotent(FileSink):
    """A repeated commit publishes the file again (a commit that is not idempotent)."""

    def commit(self, handle: FileHandle) -> CommitOutcome:
        final = self._file("", handle.txn_id)
        if not os.path.exists(self._file("prepared", handle.txn_id)) and os.path.exists(final):
            n = len([f for f in os.listdir(self.path) if f.startswith(handle.txn_id)])
            shutil.copy(final, os.path.join(self.path, f"{handle.txn_id}-again{n}.parquet"))
            return CommitOutcome.COMMITTED
        return super().commit(handle)


class MarkerMissing(FileSink):
    """No record of what was committed: a replayed commit says LOST."""

    def commit(self, handle: FileHandle) -> CommitOutcome:
        try:
            os.rename(self._file("prepared", handle.txn_id), self._file("", handle.txn_id))
        except FileNotFoundError:
            return CommitOutcome.LOST
        return CommitOutcome.COMMITTED


class NeverAlreadyCommitted(FileSink):
    """ALREADY_COMMITTED is never reported: a replay answers COMMITTED (changing nothing)."""

    def commit(self, handle: FileHandle) -> CommitOutcome:
        outcome = super().commit(handle)
        return CommitOutcome.COMMITTED if outcome is CommitOutcome.ALREADY_COMMITTED else outcome


class LostIsHidden(FileSink):
    """A transaction that is neither prepared nor committed is reported ALREADY_COMMITTED."""

    def commit(self, handle: FileHandle) -> CommitOutcome:
        outcome = super().commit(handle)
        return CommitOutcome.ALREADY_COMMITTED if outcome is CommitOutcome.LOST else outcome


class AbortIgnoresPreparedState(FileSink):
    """abort returns without rolling anything back."""

    def abort(self, handle: FileHandle) -> None:
        return None


class AbortUndoesCommit(FileSink):
    """abort ignores the committed state: it deletes the committed file, quietly."""

    def abort(self, handle: FileHandle) -> None:
        for state in ("prepared", "staging", ""):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._file(state, handle.txn_id))


class AbortNotIdempotent(FileSink):
    """abort of a transaction that is already gone raises."""

    def abort(self, handle: FileHandle) -> None:
        if not os.path.exists(self._file("prepared", handle.txn_id)):
            raise FileNotFoundError(f"no prepared file for {handle.txn_id}")
        super().abort(handle)


class ListsEveryone(FileSink):
    """list_prepared ignores the sink id."""

    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> Sequence[FileHandle]:
        found = []
        for name in sorted(os.listdir(self._dir("prepared"))) if os.path.isdir(self._dir("prepared")) else []:
            h = self._parse(name.removesuffix(".parquet"))
            if h is not None and (batch_id is None or h.batch_id == batch_id):
                found.append(h)
        return found


class ListsNothing(FileSink):
    """list_prepared finds nothing: orphans are never rolled back."""

    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> Sequence[FileHandle]:
        return []


@dataclass(frozen=True)
class LeakyHandle(FileHandle, kind="kit.test.leaky", version=1):
    """A FileHandle that carries the sink's password."""

    password: str = ""


class HandleCarriesPassword(FileSink):
    """The handle carries the password the sink was configured with."""

    def __init__(self, path: str, password: str = "") -> None:
        super().__init__(path)
        self.password = password

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> HandleCarriesPassword:
        return cls(option(options, "path") or "", option(options, "password") or "")

    def pre_commit(self, txn: Any) -> LeakyHandle:
        h = super().pre_commit(txn)
        return LeakyHandle(h.txn_id, h.sink_id, h.batch_id, h.partition_id, h.attempt_id, rows=h.rows,
                           password=self.password)


class ErrorShowsPassword(HandleCarriesPassword):
    """A login error quotes the password it was given (handles are clean)."""

    def pre_commit(self, txn: Any) -> FileHandle:  # type: ignore[override]  # the plain handle: this sink leaks elsewhere
        return FileSink.pre_commit(self, txn)

    def validate(self, schema: Any) -> None:
        if self.password != SECRET:
            raise SinkUnavailableError(f"login refused for password {self.password!r}")


class UnpicklableAfterUse(FileSink):
    """Keeps a lock (a stand-in for a live connection) once used: pickling fails."""

    def begin_transaction(self, context: Any) -> Any:
        self._connection = threading.Lock()
        return super().begin_transaction(context)


class CloseRollsBackPrepared(FileSink):
    """close() discards prepared transactions (SQLAlchemy's trap: closing the connection
    after ``prepare()`` rolls the prepared transaction back)."""

    def close(self) -> None:
        shutil.rmtree(self._dir("prepared"), ignore_errors=True)


class VisibleBeforeCommit(FileSink):
    """pre_commit already publishes the rows."""

    def pre_commit(self, txn: Any) -> FileHandle:
        h = super().pre_commit(txn)
        shutil.copy(self._file("prepared", h.txn_id), self._file("", h.txn_id))
        return h


class RollbackPrepares(FileSink):
    """rollback keeps the open transaction's rows, as if prepared."""

    def rollback(self, txn: Any) -> None:
        self._flush_rows(txn)
        if txn.writer is None:
            return
        txn.writer.close()
        txn.writer = None
        os.rename(txn.staging, self._file("prepared", txn.txn_id))


class ClaimsAtomicCommit(FileSink):
    """Claims to commit a whole batch in one local transaction (``CommitShape.LOCAL_TRANSACTION``), but
    keeps no batch marker: Spark's replay of a batch committed just before the driver died
    (before it recorded the batch) is committed again."""

    def commit_shape(self, handles: Sequence[FileHandle] = ()) -> CommitShape:
        return CommitShape.LOCAL_TRANSACTION

    def commit_all(self, handles: Sequence[FileHandle], *, recovering: bool = False) -> list[CommitOutcome]:
        return [self.commit(h) for h in handles]


BROKEN: tuple[type[FileSink], ...] = (
    CommitNotIdempotent, MarkerMissing, NeverAlreadyCommitted, LostIsHidden, AbortIgnoresPreparedState,
    AbortUndoesCommit, AbortNotIdempotent, ListsEveryone, ListsNothing, HandleCarriesPassword,
    ErrorShowsPassword, UnpicklableAfterUse, CloseRollsBackPrepared, VisibleBeforeCommit, RollbackPrepares,
    ClaimsAtomicCommit,
)


def harness_on(sink: type[FileSink] | str, out: Path) -> SinkHarness:
    """A harness on a folder: read back the committed files' ids; verify that no prepared or
    staging file of a sink id is left."""
    options = {"path": str(out)}
    if isinstance(sink, type) and issubclass(sink, HandleCarriesPassword):
        options["password"] = SECRET
    return SinkHarness(sink, options, functools.partial(committed_ids, out),
                       verify=functools.partial(assert_nothing_left, out))
