"""Requests refused for good (a 3xx, or a 4xx other than 408, 409, 425 and 429), kept as dead
letters: one JSON object each, ``<deadLetterPath>/<sink id>/<key>.json`` (default ``<outbox
folder>/dead-letters``), created once and before the request's acknowledgement (a crash between the
two finds it on recovery), and logged as a WARNING without the body."""

from __future__ import annotations

import functools
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
    """The dead-letter folder at *location* (its store opens lazily and is not pickled)."""

    def __init__(self, location: str) -> None:
        self.location = location
        self._made: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:
        return {"location": self.location, "_made": set()}

    @functools.cached_property
    def store(self) -> Any:
        return open_store(self.location)

    def write(self, letter: DeadLetter) -> bool:
        """Keep *letter* once (``False`` when its key has one already); SinkUnavailableError when the
        folder cannot be written (the request stays unacknowledged)."""
        try:
            if letter.sink_id not in self._made:
                self.store.makedirs(letter.sink_id)
                self._made.add(letter.sink_id)
            created = bool(self.store.create(f"{letter.sink_id}/{letter.key}.json",
                                        json.dumps(letter.to_json(), sort_keys=True), exclusive=True))
        except LedgerError as exc:
            raise SinkUnavailableError(f"twopc-http could not write a dead letter to {self.location}: {exc}") from exc
        if created:
            log.warning("twopc-http: %s %s (key %s, batch %s, partition %s) was refused with HTTP %s; kept as dead "
                        "letter %s", letter.method, letter.url.split("?")[0], letter.key, letter.batch_id,
                        letter.partition_id, letter.status, self.where(letter))
        return created

    def where(self, letter: DeadLetter) -> str:
        return str(self.store.path(letter.sink_id, f"{letter.key}.json"))

    def read(self, sink_id: str) -> list[dict[str, Any]]:
        """Every dead letter of *sink_id* (for tests and operators)."""
        try:
            names = sorted(self.store.list(sink_id))
            return [json.loads(self.store.read(f"{sink_id}/{name}") or "{}") for name in names]
        except LedgerError as exc:
            raise SinkUnavailableError(f"twopc-http could not read the dead letters in {self.location}: {exc}") from exc
