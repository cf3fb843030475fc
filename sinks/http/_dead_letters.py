"""Requests the server refused for good: kept as dead letters, never dropped.

A permanent refusal (a 4xx answer other than 408, 409, 425 and 429, or a 3xx: twopc-http
follows no redirect) will not change by sending the request again, so its delivery ends there:
the request, the answer and where it came from are written to the dead-letter folder
(``deadLetterPath``, local or ``s3://``; default ``<outbox folder>/dead-letters``), one JSON
object per request named by its idempotency key::

    <deadLetterPath>/<sink id>/<key>.json

The object is created at most once (the store's exclusive create), and before the request's
acknowledgement is recorded: a crash between the two sends the request again on recovery,
which meets the same refusal and finds its dead letter already there, so each refused
request has exactly one. Each dead letter is also a WARNING log line (without the body).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from twopc import LedgerError
from twopc.spi import SinkUnavailableError
from twopc.spi.operations import open_store

__all__ = ["DeadLetter", "DeadLetters"]

log = logging.getLogger("twopc.sinks.http")


@dataclass(frozen=True)
class DeadLetter:
    """One refused request: where it came from, what was sent, what came back."""

    sink_id: str
    batch_id: int
    partition_id: int
    txn_id: str
    position: int
    key: str
    method: str
    url: str
    body: str | None
    status: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "failed_at": time.time()}


class DeadLetters:
    """The dead-letter folder at *location* (the store opens lazily, and is not pickled)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._store: Any = None
        self._made: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        return {"location": self.location, "_store": None, "_made": set()}

    def _open(self) -> Any:
        if self._store is None:
            self._store = open_store(self.location)
        return self._store

    def write(self, letter: DeadLetter) -> bool:
        """Keep *letter* (once: ``False`` when its key has one already).

        Raises:
            SinkUnavailableError: the folder cannot be written (the request stays
                unacknowledged, and is sent again by the next commit).
        """
        try:
            store = self._open()
            if letter.sink_id not in self._made:
                store.makedirs(letter.sink_id)
                self._made.add(letter.sink_id)
            created = bool(store.create(f"{letter.sink_id}/{letter.key}.json",
                                        json.dumps(letter.to_json(), sort_keys=True), exclusive=True))
        except LedgerError as exc:
            raise SinkUnavailableError(f"twopc-http could not write a dead letter to {self.location}: {exc}") from exc
        if created:
            log.warning("twopc-http: %s %s (key %s, batch %s, partition %s) was refused with HTTP %s; kept as dead "
                        "letter %s", letter.method, letter.url.split("?")[0], letter.key, letter.batch_id,
                        letter.partition_id, letter.status, self.where(letter))
        return created

    def where(self, letter: DeadLetter) -> str:
        return str(self._open().path(letter.sink_id, f"{letter.key}.json"))

    def read(self, sink_id: str) -> list[dict[str, Any]]:
        """Every dead letter of *sink_id* (for tests and operators)."""
        try:
            store = self._open()
            return [json.loads(store.read(f"{sink_id}/{name}") or "{}") for name in sorted(store.list(sink_id))]
        except LedgerError as exc:
            raise SinkUnavailableError(f"twopc-http could not read the dead letters in {self.location}: {exc}") from exc
