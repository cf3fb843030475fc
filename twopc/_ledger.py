"""The commit ledger: the protocol's durable state in the checkpoint location.

Layout under ``<checkpointLocation>/twopc/``::

    sink.json                       the sink id this checkpoint belongs to
    decisions/<batch>.json          every handle of the batch, written BEFORE any commit
    committed/<batch>.json          written AFTER every handle of the batch is committed

A batch is UNDECIDED (no decision), DECIDED (decision, no committed mark) or COMMITTED.
Records are written atomically: on a local filesystem through a temporary file, fsync,
an exclusive link to the final name (so a decision is written at most once) and an fsync
of the folder; on other filesystems (``s3://``, ``hdfs://``...) through pyarrow's
filesystem layer, writing a temporary object and moving it into place.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow.fs as pafs

from ._errors import ConfigurationError, LedgerError, ProtocolError
from ._handle import TransactionHandle, decode_handle, encode_handle

__all__ = ["BatchState", "CommitLedger", "Decision"]

_FORMAT = 1


class BatchState(enum.Enum):
    """Where a batch stands in the ledger."""

    UNDECIDED = "undecided"
    DECIDED = "decided"
    COMMITTED = "committed"


@dataclass(frozen=True)
class Decision:
    """The driver's decision to commit a batch: exactly these handles, all of them."""

    sink_id: str
    batch_id: int
    handles: tuple[TransactionHandle, ...]
    decided_at: float = field(default_factory=time.time)

    @property
    def txn_ids(self) -> frozenset[str]:
        return frozenset(h.txn_id for h in self.handles)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": _FORMAT,
                "sink_id": self.sink_id,
                "batch_id": self.batch_id,
                "decided_at": self.decided_at,
                "handles": [encode_handle(h) for h in self.handles],
            },
            sort_keys=True,
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str, where: str) -> Decision:
        data = _parse(text, where)
        return cls(
            sink_id=str(data["sink_id"]),
            batch_id=int(data["batch_id"]),
            handles=tuple(decode_handle(h) for h in data["handles"]),
            decided_at=float(data.get("decided_at", 0.0)),
        )


def _parse(text: str, where: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise LedgerError(f"ledger record {where} is not valid JSON: the checkpoint is damaged") from exc
    if not isinstance(data, dict):
        raise LedgerError(f"ledger record {where} is not a JSON object: the checkpoint is damaged")
    fmt = data.get("format")
    if fmt != _FORMAT:
        raise LedgerError(
            f"ledger record {where} has format {fmt!r}; this twopc reads format {_FORMAT}: "
            f"use the twopc version that wrote this checkpoint"
        )
    return data


class _Store:
    """Atomic create/read/list/delete of small files under one root."""

    def __init__(self, location: str, filesystem: pafs.FileSystem | None = None) -> None:
        if filesystem is not None:
            self.fs, self.root = filesystem, location.rstrip("/")
            self.local = isinstance(filesystem, pafs.LocalFileSystem)
            return
        try:
            fs, path = pafs.FileSystem.from_uri(location)
        except (ValueError, TypeError, OSError) as exc:
            if "://" in location:
                raise ConfigurationError(f"cannot open checkpoint location {location!r}: {exc}") from exc
            fs, path = pafs.LocalFileSystem(), os.path.abspath(location)
        self.fs = fs
        self.root = path.rstrip("/")
        self.local = isinstance(fs, pafs.LocalFileSystem)

    def path(self, *parts: str) -> str:
        return "/".join((self.root, *parts))

    def makedirs(self, rel: str) -> None:
        try:
            self.fs.create_dir(self.path(rel), recursive=True)
        except OSError as exc:
            raise LedgerError(f"cannot create ledger folder {self.path(rel)}: {exc}") from exc

    def read(self, rel: str) -> str | None:
        p = self.path(rel)
        try:
            if self.local:
                with open(p, encoding="utf-8") as f:
                    return f.read()
            with self.fs.open_input_stream(p) as s:
                return bytes(s.read()).decode("utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            if not self.local and self.fs.get_file_info(p).type == pafs.FileType.NotFound:
                return None
            raise LedgerError(f"cannot read ledger record {p}: {exc}") from exc

    def create(self, rel: str, text: str, *, exclusive: bool) -> bool:
        """Write *rel* atomically. With *exclusive*, return False if it already exists."""
        folder, _, name = rel.rpartition("/")
        final = self.path(rel)
        tmp = self.path(folder, f".{name}.{uuid.uuid4().hex}.tmp")
        data = text.encode("utf-8")
        try:
            if self.local:
                return self._create_local(final, tmp, data, exclusive)
            if exclusive and self.fs.get_file_info(final).type != pafs.FileType.NotFound:
                return False
            with self.fs.open_output_stream(tmp) as out:
                out.write(data)
            self.fs.move(tmp, final)
            return True
        except OSError as exc:
            raise LedgerError(f"cannot write ledger record {final}: {exc}") from exc

    @staticmethod
    def _create_local(final: str, tmp: str, data: bytes, exclusive: bool) -> bool:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            if exclusive:
                try:
                    os.link(tmp, final)
                except FileExistsError:
                    return False
            else:
                os.replace(tmp, final)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        dfd = os.open(os.path.dirname(final), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return True

    def list(self, rel: str) -> list[str]:
        sel = pafs.FileSelector(self.path(rel), allow_not_found=True)
        try:
            infos = self.fs.get_file_info(sel)
        except OSError as exc:
            raise LedgerError(f"cannot list ledger folder {self.path(rel)}: {exc}") from exc
        return [i.base_name for i in infos if i.type == pafs.FileType.File and not i.base_name.startswith(".")]

    def delete(self, rel: str) -> None:
        try:
            self.fs.delete_file(self.path(rel))
        except FileNotFoundError:
            pass
        except OSError as exc:
            if self.fs.get_file_info(self.path(rel)).type != pafs.FileType.NotFound:
                raise LedgerError(f"cannot delete ledger record {self.path(rel)}: {exc}") from exc


def _name(batch_id: int) -> str:
    if batch_id < 0:
        raise ValueError(f"batch id must be >= 0, got {batch_id}")
    return f"{batch_id:020d}.json"


def _batch_ids(names: Iterable[str]) -> list[int]:
    out = []
    for n in names:
        stem = n.removesuffix(".json")
        if n.endswith(".json") and stem.isdigit():
            out.append(int(stem))
    return sorted(out)


class CommitLedger:
    """The per-checkpoint record of decided and committed batches.

    Args:
        checkpoint_location: the Spark query's ``checkpointLocation`` (a local path or a
            URI pyarrow understands). The ledger lives in its ``twopc/`` folder.
        filesystem: a pyarrow filesystem to use instead of resolving the location's URI
            (then *checkpoint_location* is a path within it).
    """

    def __init__(self, checkpoint_location: str, *, filesystem: pafs.FileSystem | None = None) -> None:
        self.checkpoint_location = checkpoint_location
        self._store = _Store(checkpoint_location.rstrip("/") + "/twopc", filesystem)
        self._store.makedirs("decisions")
        self._store.makedirs("committed")

    @property
    def location(self) -> str:
        return self._store.root

    # -- sink id ---------------------------------------------------------------------
    def recorded_sink_id(self) -> str | None:
        """The sink id recorded in this checkpoint, or None before the first write."""
        text = self._store.read("sink.json")
        return None if text is None else str(_parse(text, self._store.path("sink.json"))["sink_id"])

    def bind_sink_id(self, requested: str | None, default: str) -> str:
        """Return the sink id this checkpoint belongs to, recording it on first use.

        Raises:
            ConfigurationError: *requested* differs from the id already recorded.
        """
        text = self._store.read("sink.json")
        if text is None:
            chosen = requested or default
            self._store.create("sink.json", json.dumps({"format": _FORMAT, "sink_id": chosen}), exclusive=True)
            text = self._store.read("sink.json") or ""
        recorded = str(_parse(text, self._store.path("sink.json"))["sink_id"])
        if requested and requested != recorded:
            raise ConfigurationError(
                f"checkpoint {self.checkpoint_location} belongs to sink id {recorded!r}, but option "
                f"sinkId={requested!r} was given: drop the sinkId option, or use a new checkpoint location"
            )
        return recorded

    # -- batches ---------------------------------------------------------------------
    def state(self, batch_id: int) -> BatchState:
        if self._store.read("committed/" + _name(batch_id)) is not None:
            return BatchState.COMMITTED
        if self._store.read("decisions/" + _name(batch_id)) is not None:
            return BatchState.DECIDED
        return BatchState.UNDECIDED

    def decision(self, batch_id: int) -> Decision | None:
        rel = "decisions/" + _name(batch_id)
        text = self._store.read(rel)
        return None if text is None else Decision.from_json(text, self._store.path(rel))

    def record_decision(self, decision: Decision) -> Decision:
        """Durably record *decision* unless the batch already has one; return the one that
        stands. Must complete before any handle of the batch is committed.

        Raises:
            ProtocolError: a different decision is already recorded for the batch.
        """
        rel = "decisions/" + _name(decision.batch_id)
        if self._store.create(rel, decision.to_json(), exclusive=True):
            return decision
        existing = self.decision(decision.batch_id)
        assert existing is not None
        if existing.txn_ids != decision.txn_ids:
            raise ProtocolError(
                f"batch {decision.batch_id} already has a different decision in {self.location}"
            )
        return existing

    def mark_committed(self, batch_id: int, *, summary: dict[str, Any] | None = None) -> None:
        """Record that every handle of *batch_id* is committed (idempotent)."""
        body = {"format": _FORMAT, "batch_id": batch_id, "committed_at": time.time(), **(summary or {})}
        self._store.create("committed/" + _name(batch_id), json.dumps(body, sort_keys=True), exclusive=True)

    def decided_batches(self) -> list[int]:
        return _batch_ids(self._store.list("decisions"))

    def committed_batches(self) -> list[int]:
        return _batch_ids(self._store.list("committed"))

    def pending(self) -> list[Decision]:
        """Decisions whose batch is not marked committed, oldest first."""
        committed = set(self.committed_batches())
        out = []
        for b in self.decided_batches():
            if b not in committed:
                d = self.decision(b)
                if d is not None:
                    out.append(d)
        return out

    def latest_committed(self) -> int | None:
        batches = self.committed_batches()
        return batches[-1] if batches else None

    def decisions(self, batch_ids: Sequence[int] | None = None) -> list[Decision]:
        ids = self.decided_batches() if batch_ids is None else batch_ids
        return [d for b in ids if (d := self.decision(b)) is not None]

    def purge(self, *, keep_last: int) -> list[int]:
        """Delete committed batches' records except the *keep_last* newest; return the purged
        batch ids. Decided-but-uncommitted batches are never purged."""
        committed = self.committed_batches()
        if keep_last < 1 or len(committed) <= keep_last:
            return []
        victims = committed[: len(committed) - keep_last]
        for b in victims:
            self._store.delete("decisions/" + _name(b))
            self._store.delete("committed/" + _name(b))
        return victims

    # -- auxiliary state (twopc's metrics) ----------------------------------------------
    def read_aux(self, name: str) -> str | None:
        """The auxiliary record *name* (a plain file name in the ledger folder), or None."""
        return self._store.read(name)

    def write_aux(self, name: str, text: str) -> None:
        """Replace the auxiliary record *name* atomically (never a decision or a mark). On a
        local disk without fsync: a crash may lose the last update, never tear it.

        Raises:
            LedgerError: it cannot be written.
        """
        if "/" in name or name in ("sink.json",):
            raise ValueError(f"{name!r} is not an auxiliary record name")
        if not self._store.local:
            self._store.create(name, text, exclusive=False)
            return
        final = self._store.path(name)
        tmp = self._store.path(f".{name}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise LedgerError(f"cannot write {final}: {exc}") from exc
