"""The outboxes of ``twopc-http`` in one folder (local, or ``s3://`` through the checkpoint store)::

    outbox/<txn>.jsonl            a task attempt's requests, written whole at prepare
    acks/<txn>/<seq>-<id>         acknowledgement records of a delivery (each written whole)
    delivered/<txn>.json          the outbox was delivered (commit's "already committed")

``<txn>`` is :attr:`twopc.Xid.path_name`; every object is written whole. An outbox is prepared while
it has no ``delivered`` marker; once a record exists its delivery has started (no rollback); the
marker is written before the outbox and records are deleted. An outbox is a JSON header line, then
``[key, method, url, body]`` lines; a record holds ``<position> <status or dead>`` lines, one write
per ``ackEvery`` answers or ``ackInterval`` (a write per request would cost more than the request)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from twopc import LedgerError, Xid
from twopc.spi import ProtocolError, SinkUnavailableError
from twopc.spi.operations import open_store, recover_command

__all__ = ["Outbox", "Outboxes"]

_SUFFIX = ".jsonl"


@dataclass(frozen=True)
class Outbox:
    """An outbox read back: its header and requests."""

    txn_id: str
    header: dict[str, Any]
    requests: list[tuple[str, str, str, str | None]]


class Outboxes:
    """The outbox folder at *location* (its store opens lazily and is not pickled)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._made = False

    def __getstate__(self) -> dict[str, Any]:
        return {"location": self.location, "_made": False}

    @functools.cached_property
    def store(self) -> Any:
        return _guarded(lambda: open_store(self.location), f"open the outbox folder {self.location}")

    def make_folders(self) -> None:
        """Create the folders (once; a no-op on S3), or raise SinkError."""
        if not self._made:
            for rel in ("outbox", "acks", "delivered"):
                _guarded(lambda rel=rel: self.store.makedirs(rel), f"create the outbox folder {self.location}")
            self._made = True

    def where(self, txn_id: str) -> str:
        return str(self.store.path("outbox", txn_id + _SUFFIX))

    def write(self, txn_id: str, header: dict[str, Any], lines: Sequence[str]) -> None:
        """Write the outbox of *txn_id* whole, once (ProtocolError when it exists already)."""
        self.make_folders()
        text = "\n".join([json.dumps(header, sort_keys=True), *lines]) + "\n"
        if not _guarded(lambda: self.store.create(f"outbox/{txn_id}{_SUFFIX}", text, exclusive=True),
                        f"write the outbox of {txn_id}"):
            raise ProtocolError(f"the outbox of {txn_id} exists already: a transaction id was used twice")

    def read(self, txn_id: str) -> Outbox | None:
        text = _guarded(lambda: self.store.read(f"outbox/{txn_id}{_SUFFIX}"), f"read the outbox of {txn_id}")
        if text is None:
            return None
        lines = text.splitlines()
        try:
            header = json.loads(lines[0])
            requests = [tuple(json.loads(line)) for line in lines[1:] if line]
        except (ValueError, IndexError) as exc:
            raise ProtocolError(f"the outbox {self.where(txn_id)} is damaged ({exc}): it cannot be delivered. Send "
                                f"its batch's requests by other means, then give the batch up: "
                                f"{recover_command('<checkpointLocation>', '--accept-lost', '<batch>')}") from None
        return Outbox(txn_id, header, requests)

    def delivered(self, txn_id: str) -> dict[str, Any] | None:
        text = _guarded(lambda: self.store.read(f"delivered/{txn_id}.json"), f"read the marker of {txn_id}")
        return None if text is None else dict(json.loads(text))

    def acknowledged(self, txn_id: str) -> dict[int, str] | None:
        """Position -> status of *txn_id*'s acknowledged requests; ``None`` when its delivery never started."""
        names = _guarded(lambda: self.store.list(f"acks/{txn_id}"), f"list the acknowledgements of {txn_id}")
        if not names:
            return None
        out: dict[int, str] = {}
        for name in names:
            text = _guarded(lambda name=name: self.store.read(f"acks/{txn_id}/{name}"),
                            f"read the acknowledgements of {txn_id}") or ""
            for line in text.splitlines():
                position, _, status = line.partition(" ")
                if position.isdigit():
                    out[int(position)] = status
        return out

    def acknowledge(self, txn_id: str, answered: Iterable[tuple[int, str]]) -> None:
        """Record *answered* ``(position, status)`` pairs (an empty record: the delivery started)."""
        text = "".join(f"{p} {s}\n" for p, s in answered) or "start\n"
        name = f"acks/{txn_id}/{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        _guarded(lambda: self.store.makedirs(f"acks/{txn_id}"), f"record acknowledgements of {txn_id}")
        _guarded(lambda: self.store.create(name, text, exclusive=True), f"record acknowledgements of {txn_id}")

    def mark_delivered(self, txn_id: str, summary: dict[str, Any]) -> None:
        """Write the delivered marker (kept if one exists), then delete the outbox and its records."""
        self.make_folders()
        _guarded(lambda: self.store.create(f"delivered/{txn_id}.json", json.dumps(summary, sort_keys=True),
                                           exclusive=True), f"mark {txn_id} delivered")
        for name in _guarded(lambda: self.store.list(f"acks/{txn_id}"), f"list the acknowledgements of {txn_id}"):
            _guarded(lambda name=name: self.store.delete(f"acks/{txn_id}/{name}"), f"delete records of {txn_id}")
        if "://" not in self.location:  # a local folder: remove the emptied one too
            with contextlib.suppress(OSError):
                os.rmdir(self.store.path("acks", txn_id))
        _guarded(lambda: self.store.delete(f"outbox/{txn_id}{_SUFFIX}"), f"delete the outbox of {txn_id}")

    def discard(self, txn_id: str) -> bool:
        """Delete the outbox of *txn_id* unless its delivery started or ended (then ``False``)."""
        if self.delivered(txn_id) is not None or self.acknowledged(txn_id) is not None:
            return False
        _guarded(lambda: self.store.delete(f"outbox/{txn_id}{_SUFFIX}"), f"delete the outbox of {txn_id}")
        return True

    def pending(self, sink_id: str, batch_id: int | None = None) -> list[Xid]:
        """The ids of *sink_id*'s outboxes (of *batch_id*) not yet delivered."""
        out = []
        for name in _guarded(lambda: self.store.list("outbox"), f"list the outboxes in {self.location}"):
            stem = name.removesuffix(_SUFFIX)
            if stem == name or (xid := Xid.parse(stem)) is None or xid.path_name != stem or xid.sink_id != sink_id:
                continue
            if (batch_id is None or xid.batch_id == batch_id) and self.delivered(xid.path_name) is None:
                out.append(xid)
        return sorted(out, key=lambda x: (x.batch_id, x.partition_id, x.attempt_id, x.nonce))

    def purge(self, done: Callable[[Xid], bool]) -> int:
        """Delete the delivered markers *done* says are no longer needed; how many."""
        removed = 0
        for name in _guarded(lambda: self.store.list("delivered"), f"list the markers in {self.location}"):
            if (xid := Xid.parse(name.removesuffix(".json"))) is not None and done(xid):
                _guarded(lambda name=name: self.store.delete(f"delivered/{name}"), f"delete the marker {name}")
                removed += 1
        return removed


def _guarded(fn: Any, what: str) -> Any:
    """``fn()``, a store failure raised as the sink's :class:`SinkUnavailableError`."""
    try:
        return fn()
    except LedgerError as exc:
        raise SinkUnavailableError(f"twopc-http could not {what}: {exc}") from exc
