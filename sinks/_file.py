"""A file sink: the worked example of writing a two-phase-commit sink.

Each task attempt writes one Parquet file, whose place is its transaction's state::

    <path>/_twopc/staging/<txn>.parquet    open: being written (invisible)
    <path>/_twopc/prepared/<txn>.parquet   prepared: complete and fsynced (invisible)
    <path>/<txn>.parquet                   committed: visible to readers

``<path>/_twopc/owners/<sink id>`` names the checkpoint of the query that writes a sink id. Every step is an atomic
``rename`` followed by an fsync of the folder, so a crash leaves each file whole in exactly one place; readers ignore
names starting with ``_``. ``<txn>`` is the :class:`twopc.Xid`'s path form, so prepared files of attempts that never
reached the driver can be found. The path must be one filesystem every executor sees at the same path.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from twopc import (
    CommitOutcome,
    TransactionContext,
    TransactionHandle,
    TwoPhaseCommitDataSource,
    TwoPhaseCommitSink,
    Xid,
)
from twopc.spi import (
    Inspectable,
    MissingOptionError,
    NamedTarget,
    OwnerRecord,
    PreparedDetail,
    ProtocolError,
    TargetConfigurationError,
    WriteSetup,
    make_folder,
    validate_sink_id,
)

from ._options import OptionReader
from ._secrets import credential_free

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["FileDataSource", "FileHandle", "FileSink"]

_SUFFIX = ".parquet"
_FOLDER_HELP = {"needs": 'the file sink (option "path")',
                "fix": 'give option "path" the path of a folder (new, or one twopc-file wrote)'}


@dataclass(frozen=True)
class FileHandle(TransactionHandle, kind="twopc.file", version=1):
    """A prepared Parquet file: ``txn_id`` is its name (without the suffix)."""

    rows: int = 0


@dataclass
class _OpenFile:
    """An open transaction: a Parquet writer on a staging file."""

    context: TransactionContext
    txn_id: str
    staging: str
    writer: pq.ParquetWriter | None = None
    rows: int = 0
    pending_rows: list[dict[str, Any]] = field(default_factory=list)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FileSink(TwoPhaseCommitSink[dict[str, Any], _OpenFile, FileHandle], WriteSetup, Inspectable, NamedTarget):
    """Exactly-once Parquet files in a folder.

    Args:
        path: the output folder (created if missing).
    """

    __handle_type__ = FileHandle

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> FileSink:
        """Build the sink from Spark options: ``path`` (or ``save(path)``), nothing else. Raises ``MissingOptionError``:
        no output folder; ``ConfigurationError``: an unknown option."""
        reader = OptionReader(options, "twopc-file")
        path = reader.text("path")
        reader.refuse_unknown()
        if not path:
            raise MissingOptionError('the file sink needs an output folder: .option("path", "/data/out") '
                                     "or .save(path)")
        return cls(path)

    reopen_options = staticmethod(credential_free)  #: the options without a secret, as checkpoints record them

    def claim_sink_id(self, sink_id: str, owner: str) -> OwnerRecord | None:
        """Create ``_twopc/owners/<sink id>`` holding *owner* whole or not at all (a hard link), then compare.
        Raises ``TargetConfigurationError``: the folder cannot be written."""
        folder = self._dir("owners")
        record = os.path.join(folder, validate_sink_id(sink_id))
        try:
            make_folder(folder, TargetConfigurationError, **_FOLDER_HELP)
            if not os.path.exists(record):
                tmp = f"{record}.{os.getpid()}.tmp"
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(owner)
                    f.flush()
                    os.fsync(f.fileno())
                try:
                    os.link(tmp, record)
                except FileExistsError:
                    pass  # a rival query recorded itself first: compared below
                finally:
                    os.unlink(tmp)
                _fsync_dir(folder)
            with open(record, encoding="utf-8") as f:
                recorded = f.read()
        except OSError as exc:
            raise TargetConfigurationError(
                f"cannot record the owner of sink id {sink_id!r} in {folder}: {exc.strerror or exc}: give option "
                f'"path" a folder this user may write to; nothing was written') from None
        return None if recorded == owner else OwnerRecord(recorded, f"rm '{record}'")

    def target_identity(self) -> str:
        """``files <absolute output folder>``."""
        return f"files {self.path}"

    def describe(self) -> str:
        return f"Parquet files in {self.path}"

    def validate(self, schema: pa.Schema) -> None:
        """Create the output folder and its ``_twopc`` folders on the driver, before any task. Raises
        ``TargetConfigurationError``: a file stands where a folder must be, or it cannot be created."""
        for state in ("staging", "prepared"):
            try:
                make_folder(self._dir(state), TargetConfigurationError, **_FOLDER_HELP)
            except OSError as exc:
                raise TargetConfigurationError(
                    f'cannot create the folder {self._dir(state)} of option "path": {exc.strerror or exc}: give '
                    f"a folder this user may write to; nothing was written") from None

    def _dir(self, state: str) -> str:
        return os.path.join(self.path, "_twopc", state) if state else self.path

    def _file(self, state: str, txn_id: str) -> str:
        return os.path.join(self._dir(state), txn_id + _SUFFIX)

    @staticmethod
    def _parse(txn_id: str) -> FileHandle | None:
        xid = Xid.parse(txn_id)
        if xid is None or xid.path_name != txn_id:
            return None
        return FileHandle(txn_id, xid.sink_id, xid.batch_id, xid.partition_id, xid.attempt_id, rows=-1)

    def begin_transaction(self, context: TransactionContext) -> _OpenFile:
        for state in ("staging", "prepared"):
            os.makedirs(self._dir(state), exist_ok=True)
        txn_id = context.xid().path_name
        return _OpenFile(context, txn_id, self._file("staging", txn_id))

    def invoke(self, txn: _OpenFile, value: dict[str, Any]) -> None:
        txn.pending_rows.append(value)

    def invoke_batch(self, txn: _OpenFile, batch: pa.RecordBatch) -> None:
        self._flush_rows(txn)
        if txn.writer is None:
            txn.writer = _parquet_writer(txn.staging, batch.schema)
        txn.writer.write_batch(batch)
        txn.rows += batch.num_rows

    def _flush_rows(self, txn: _OpenFile) -> None:
        if txn.pending_rows:
            import pyarrow as pa
            rows, txn.pending_rows = txn.pending_rows, []
            self.invoke_batch(txn, pa.RecordBatch.from_pylist(rows))

    def pre_commit(self, txn: _OpenFile) -> FileHandle:
        """Close and fsync the staging file, then rename it into ``prepared/``."""
        self._flush_rows(txn)
        if txn.writer is None:  # no rows: an empty file keeps the protocol uniform
            import pyarrow as pa
            txn.writer = _parquet_writer(txn.staging, pa.schema([]))
        txn.writer.close()
        with open(txn.staging, "rb+") as f:
            os.fsync(f.fileno())
        os.rename(txn.staging, self._file("prepared", txn.txn_id))
        _fsync_dir(self._dir("prepared"))
        c = txn.context
        return FileHandle(txn.txn_id, c.sink_id, c.batch_id, c.partition_id, c.attempt_id, rows=txn.rows)

    def rollback(self, txn: _OpenFile) -> None:
        if txn.writer is not None:
            with contextlib.suppress(Exception):  # the file is being discarded anyway
                txn.writer.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(txn.staging)

    def commit(self, handle: FileHandle) -> CommitOutcome:
        """Rename the prepared file into the output folder (atomic, idempotent). Raises ``ProtocolError``: the
        handle's id is not a twopc id (it must not name a path outside the folder)."""
        txn_id = Xid.checked(handle.txn_id, what="twopc file transaction")
        final = self._file("", txn_id)
        try:
            os.rename(self._file("prepared", txn_id), final)
        except FileNotFoundError:
            return CommitOutcome.ALREADY_COMMITTED if os.path.exists(final) else CommitOutcome.LOST
        _fsync_dir(self.path)
        return CommitOutcome.COMMITTED

    def abort(self, handle: FileHandle) -> None:
        """Delete the prepared (or orphaned staging) file. Raises ProtocolError if it was committed."""
        txn_id = Xid.checked(handle.txn_id, what="twopc file transaction")
        gone = 0
        for state in ("prepared", "staging"):
            try:
                os.unlink(self._file(state, txn_id))
            except FileNotFoundError:
                gone += 1
        if gone == 2 and os.path.exists(self._file("", txn_id)):
            raise ProtocolError(f"cannot abort {handle.txn_id}: it was committed")

    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> Sequence[FileHandle]:
        """Prepared files of *sink_id*, plus staging files killed attempts left behind."""
        names: list[str] = []
        for state in ("prepared", "staging"):
            with contextlib.suppress(FileNotFoundError):
                names += os.listdir(self._dir(state))
        handles = (self._parse(n[: -len(_SUFFIX)]) for n in sorted(set(names)) if n.endswith(_SUFFIX))
        return [h for h in handles
                if h is not None and h.sink_id == sink_id and (batch_id is None or h.batch_id == batch_id)]

    def prepared_details(self, sink_id: str) -> list[PreparedDetail]:
        """:meth:`list_prepared` with each file's modification time and size in bytes."""
        out = []
        for h in self.list_prepared(sink_id):
            for state in ("prepared", "staging"):
                try:
                    st = os.stat(self._file(state, h.txn_id))
                except FileNotFoundError:
                    continue
                out.append(PreparedDetail(h, f"{state} file", st.st_mtime, st.st_size, "bytes"))
                break
        return out

    def committed_files(self) -> list[str]:
        """Paths of the committed files, for readers that do not skip ``_`` folders."""
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return []
        return sorted(os.path.join(self.path, n) for n in names if n.endswith(_SUFFIX))


class FileDataSource(TwoPhaseCommitDataSource):
    """``format("twopc-file")``: exactly-once Parquet files."""

    sink_class = FileSink
    format_name = "twopc-file"


def _parquet_writer(path: str, schema: pa.Schema) -> pq.ParquetWriter:
    """A Parquet writer, imported here so that ``import twopc.sinks`` loads neither pyarrow nor Parquet."""
    import pyarrow.parquet as pq
    return pq.ParquetWriter(path, schema)
