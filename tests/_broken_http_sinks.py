"""Deliberately broken ``twopc-http`` sinks, each an :class:`~twopc.sinks.HttpSink` with one
defect, for proving that the conformance kit and the chaos schedules fail them. Importable by
path (the kit and the schedules' jobs run them in other processes)."""

from __future__ import annotations

import uuid
from typing import Any

from twopc.sinks import HttpHandle, HttpSink
from twopc.sinks.http._deliver import Sender
from twopc.sinks.http._requests import RequestMaker


class SendsAtPrepare(HttpSink):
    """Sends a task's requests as soon as they are prepared, before the driver decides."""

    def pre_commit(self, txn: Any) -> HttpHandle:
        handle = super().pre_commit(txn)
        self.commit(handle)
        return handle


class _KeyPerTry(Sender):
    def headers(self, key: str, txn_id: str, *, json: bool) -> dict[str, str]:
        return super().headers(uuid.uuid4().hex, txn_id, json=json)


class KeyChangesOnRetry(HttpSink):
    """Draws a new idempotency key for every try of a request: a retry after a lost reply is
    a new operation for the server."""

    sender = _KeyPerTry


class _RandomKeys(RequestMaker):
    def _key(self, row: Any) -> str:
        return uuid.uuid4().hex


class KeyChangesOnReplay(HttpSink):
    """Draws each row's key at random when it is prepared: the same row of a replayed batch
    gets another key, even with ``keyColumn``."""

    def begin_transaction(self, context: Any) -> Any:
        txn = super().begin_transaction(context)
        txn.maker = _RandomKeys(self.options, context.sink_id, context.batch_id, context.partition_id)
        return txn
