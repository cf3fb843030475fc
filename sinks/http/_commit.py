"""Delivering the decided outboxes of one commit (driver side): every unacknowledged request goes
into one pool of ``maxConcurrency`` workers; the answers (a refused request's dead letter first) are
recorded per outbox every ``ackEvery`` answers or ``ackInterval``, so a crash re-sends only what no
record acknowledges. Fault points: ``http_before_ack`` before each record (a crash there sends a
request twice) and ``http_before_delivered`` before an outbox's delivered marker."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from twopc import faultinject

from ._dead_letters import DeadLetter, DeadLetters
from ._deliver import Answer, Sender
from ._options import HttpOptions
from ._outbox import Outbox, Outboxes

__all__ = ["BoxResult", "deliver"]

log = logging.getLogger("twopc.sinks.http")

BEFORE_ACK = faultinject.declare(
    "http_before_ack", "driver (twopc-http): answers received, their acknowledgement record not yet written")
BEFORE_DELIVERED = faultinject.declare(
    "http_before_delivered", "driver (twopc-http): every request of an outbox acknowledged, its delivered marker "
                             "not yet written")

T = TypeVar("T")


@dataclass
class BoxResult:
    """One outbox's delivery: requests delivered, dead-lettered and left unanswered (0: delivered)."""

    outbox: Outbox
    acked: dict[int, str]
    delivered: int = 0
    dead: int = 0
    failure: str = ""
    unanswered: int = 0
    _buffer: list[tuple[int, str]] = field(default_factory=list)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class _Delivery:
    def __init__(self, options: HttpOptions, outboxes: Outboxes, dead: DeadLetters, boxes: list[BoxResult],
                 sender: type[Sender]) -> None:
        self.o = options
        self.outboxes = outboxes
        self.dead = dead
        self.boxes = boxes
        self.sender = sender(options, options.credentials.redact)
        self.buffered = 0

    def queue(self) -> list[tuple[BoxResult, int]]:
        """Every unacknowledged request, the outboxes interleaved (each gets its share early)."""
        per_box = [[(b, i) for i in range(len(b.outbox.requests)) if i not in b.acked] for b in self.boxes]
        return [x for row in itertools.zip_longest(*per_box) for x in row if x is not None]

    async def run(self) -> None:
        todo = self.queue()
        todo.reverse()  # popped from the end
        async with self.sender.client() as client:
            async def worker() -> None:
                while todo and not self.sender.stopping:
                    box, position = todo.pop()
                    key, method, url, body = box.outbox.requests[position]
                    answer = await self.sender.send(client, key, method, url, body, box.outbox.txn_id)
                    await self.record(box, position, answer)
            finished = asyncio.Event()
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(self.tick(finished))
                    workers = [group.create_task(worker()) for _ in range(min(self.o.max_concurrency, len(todo)))]
                    await asyncio.gather(*workers)
                    finished.set()
            except BaseExceptionGroup as grouped:
                raise grouped.exceptions[0] from None
        for box in self.boxes:  # what was answered while the ticker was writing another box's record
            await self.flush(box)

    async def record(self, box: BoxResult, position: int, answer: Answer) -> None:
        if answer.outcome == "failed":
            box.failure = answer.detail
            box.unanswered += 1
            self.sender.stopping = True
            return
        if answer.outcome == "dead":
            h = box.outbox.header
            letter = DeadLetter(h["sink_id"], h["batch_id"], h["partition_id"], box.outbox.txn_id, position,
                                *box.outbox.requests[position], answer.status or 0, answer.detail)
            await asyncio.to_thread(self.dead.write, letter)  # before its acknowledgement: never dropped
            box.dead += 1
            box._buffer.append((position, "dead"))
        else:
            box.delivered += 1
            box._buffer.append((position, str(answer.status)))
        self.buffered += 1
        if len(box._buffer) >= self.o.ack_every:
            await self.flush(box)

    async def flush(self, box: BoxResult) -> None:
        async with box._lock:
            if not box._buffer:
                return
            items, box._buffer = box._buffer, []
            faultinject.fault_point(BEFORE_ACK, batch_id=box.outbox.header["batch_id"],
                                    partition=box.outbox.header["partition_id"])
            await asyncio.to_thread(self.outboxes.acknowledge, box.outbox.txn_id, items)
            box.acked.update(items)

    async def tick(self, finished: asyncio.Event) -> None:
        while not finished.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), self.o.ack_interval.seconds)
            for box in self.boxes:
                await self.flush(box)


def deliver(options: HttpOptions, outboxes: Outboxes, dead: DeadLetters,
            pending: Sequence[tuple[Outbox, dict[int, str] | None]], sender: type[Sender] = Sender) -> list[BoxResult]:
    """Deliver every unacknowledged request of *pending* (each outbox with its acknowledged requests,
    ``None`` when never started), marking each fully answered outbox delivered; one :class:`BoxResult` per
    outbox. Raises ConfigurationError (no client: a CA bundle, a secret) or SinkUnavailableError (a store)."""
    options.credentials.secret()  # a missing environment variable fails before anything is sent
    boxes = []
    for outbox, acked in pending:
        if acked is None:  # the delivery starts: from now on the outbox may not be rolled back
            outboxes.acknowledge(outbox.txn_id, [])
        boxes.append(BoxResult(outbox, dict(acked or {})))
    delivery = _Delivery(options, outboxes, dead, boxes, sender)
    if delivery.queue():
        _run(delivery.run())
    for box in boxes:
        if box.unanswered == 0 and len(box.acked) == len(box.outbox.requests):
            faultinject.fault_point(BEFORE_DELIVERED, batch_id=box.outbox.header["batch_id"],
                                    partition=box.outbox.header["partition_id"])
            outboxes.mark_delivered(box.outbox.txn_id, {"requests": len(box.outbox.requests),
                                                        "dead": sum(s == "dead" for s in box.acked.values())})
        else:
            box.unanswered = len(box.outbox.requests) - len(box.acked)
    return boxes


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run *coro*: here, or in a thread of its own where an event loop already runs (a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
