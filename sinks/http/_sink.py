"""``HttpSink``: a task's rows become requests stored in an outbox (prepare), which the driver
sends once the batch is decided (commit). See :mod:`twopc.sinks.http`."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from twopc import CommitOutcome, ConfigurationError, TransactionContext, TwoPhaseCommitSink, Xid
from twopc.spi import (
    BatchCommit,
    Inspectable,
    MarkerPurge,
    MissingOptionError,
    NamedTarget,
    PreparedDetail,
    ProtocolError,
    SinkUnavailableError,
    WriteSetup,
)

from .._handles import HttpHandle
from .._secrets import credential_free
from ._commit import deliver
from ._dead_letters import DeadLetters
from ._deliver import Sender, load_httpx
from ._options import HttpOptions
from ._outbox import Outboxes
from ._requests import RequestMaker

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["HttpSink"]

log = logging.getLogger("twopc.sinks.http")

#: Unacknowledged keys ``twopc status`` shows per outbox (then how many more).
SHOWN_KEYS = 10


@dataclass
class _OpenOutbox:
    """An open transaction: the requests of one task attempt, in memory until prepared."""

    context: TransactionContext
    txn_id: str
    maker: RequestMaker
    lines: list[str] = field(default_factory=list)


class HttpSink(TwoPhaseCommitSink[dict[str, Any], _OpenOutbox, HttpHandle], WriteSetup, BatchCommit, Inspectable,
               MarkerPurge, NamedTarget):
    """Exactly-once HTTP requests: one per row, sent only for decided batches.

    Args:
        options: the parsed options (:meth:`from_options` reads them from Spark's).
    """

    __handle_type__ = HttpHandle
    #: What sends each request with its retries (:class:`~twopc.sinks.http._deliver.Sender`).
    sender: ClassVar[type[Sender]] = Sender

    def __init__(self, options: HttpOptions) -> None:
        self.options = options

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> HttpSink:
        """Build the sink from Spark's writer options (see the options reference).

        Raises:
            MissingOptionError: no ``url``.
            ConfigurationError: an option is unknown or invalid.
        """
        return cls(HttpOptions.read(options))

    reopen_options = staticmethod(credential_free)  #: the options without a secret, as checkpoints record them

    @functools.cached_property
    def outboxes(self) -> Outboxes:
        if not self.options.outbox:
            raise MissingOptionError(
                "twopc-http keeps its outboxes under the write's checkpointLocation; built outside a Spark "
                "write (a twopc.composite() participant, a test) it needs option outbox: a folder, local "
                "or s3://, that the driver and every executor reach")
        return Outboxes(self.options.outbox)

    @functools.cached_property
    def dead_letters(self) -> DeadLetters:
        return DeadLetters(self.options.dead_letter_path or f"{self.outboxes.location}/dead-letters")

    def target_identity(self) -> str:
        return f"http {self.options.method} {self.options.url}"

    def describe(self) -> str:
        o = self.options
        tls = "" if o.tls_verify else ", TLS verification OFF"
        return f"HTTP {o.method} {o.url} (outbox {o.outbox or '<checkpoint>/twopc-http'}{tls})"

    def validate(self, schema: pa.Schema) -> None:
        """On the driver, before any task (sends nothing): httpx, the named columns, an environment
        secret and the outbox folder are there.

        Raises:
            MissingExtraError: httpx is not installed (``pyspark-twopc[http]``).
            ConfigurationError: a column, a secret or the outbox folder is missing."""
        load_httpx()
        RequestMaker(self.options, "check", 0, 0).check_columns(list(schema.names))
        self.options.credentials.secret()
        self.outboxes.make_folders()
        if not self.options.tls_verify:
            log.warning("twopc-http: TLS verification is off for %s (option tlsVerify=false): anyone on the path "
                        "can read and change the requests; give the server's CA with tlsCaBundle instead",
                        self.options.url.split("?")[0])

    def begin_transaction(self, context: TransactionContext) -> _OpenOutbox:
        self.outboxes.make_folders()
        maker = RequestMaker(self.options, context.sink_id, context.batch_id, context.partition_id)
        return _OpenOutbox(context, context.xid().path_name, maker)

    def invoke(self, txn: _OpenOutbox, value: dict[str, Any]) -> None:
        txn.maker.check_columns(list(value))
        txn.lines.extend(txn.maker.lines([value]))

    def invoke_batch(self, txn: _OpenOutbox, batch: pa.RecordBatch) -> None:
        txn.maker.check_columns(list(batch.schema.names))
        txn.lines.extend(txn.maker.lines(batch.to_pylist()))

    def pre_commit(self, txn: _OpenOutbox) -> HttpHandle:
        """Write the outbox whole; nothing is sent."""
        c = txn.context
        header: dict[str, Any] = {"sink_id": c.sink_id, "batch_id": c.batch_id, "partition_id": c.partition_id,
                  "attempt_id": c.attempt_id, "requests": len(txn.lines), "created": time.time()}
        self.outboxes.write(txn.txn_id, header, txn.lines)
        txn.lines = []
        return HttpHandle(txn.txn_id, c.sink_id, c.batch_id, c.partition_id, c.attempt_id,
                          outbox=self.outboxes.location, requests=header["requests"])

    def rollback(self, txn: _OpenOutbox) -> None:
        txn.lines = []  # nothing was written before pre_commit

    def _txn_id(self, handle: HttpHandle) -> str:
        txn_id = Xid.checked(handle.txn_id, what="twopc-http transaction id")
        if handle.outbox and handle.outbox != self.outboxes.location:
            raise ConfigurationError(
                f"the handle of {txn_id} names the outbox folder {handle.outbox}, but this sink's is "
                f"{self.outboxes.location}: give option outbox={handle.outbox} (the write's own)")
        return txn_id

    def commit(self, handle: HttpHandle) -> CommitOutcome:
        """Deliver the outbox's unacknowledged requests; see :meth:`commit_all`."""
        return self.commit_all([handle])[0]

    def commit_all(self, handles: Sequence[HttpHandle], *, recovering: bool = False) -> list[CommitOutcome]:
        """Deliver every outbox of *handles* in one pool: ``ALREADY_COMMITTED`` if marked delivered,
        ``LOST`` if gone, ``COMMITTED`` once every request is answered (delivered or dead-lettered).

        Raises:
            SinkUnavailableError: requests still unanswered after the retries (the next commit sends them).
            ConfigurationError: a handle names another outbox folder, or a secret is missing."""
        outcomes: list[CommitOutcome | None] = []
        pending = []
        for h in handles:
            txn_id = self._txn_id(h)
            if self.outboxes.delivered(txn_id) is not None:
                outcomes.append(CommitOutcome.ALREADY_COMMITTED)
            elif (outbox := self.outboxes.read(txn_id)) is None:
                outcomes.append(CommitOutcome.LOST)
            else:
                outcomes.append(None)
                pending.append((outbox, self.outboxes.acknowledged(txn_id)))
        results = deliver(self.options, self.outboxes, self.dead_letters, pending, self.sender) if pending else []
        stuck = [r for r in results if r.unanswered]
        if dead := sum(r.dead for r in results):
            log.warning("twopc-http: %s request(s) of batch %s were refused for good and kept as dead letters in %s",
                        dead, handles[0].batch_id, self.dead_letters.location)
        if stuck:
            left = sum(r.unanswered for r in stuck)
            why = next((r.failure for r in results if r.failure), "not answered")
            raise SinkUnavailableError(
                f"twopc-http: {left} request(s) of batch {handles[0].batch_id} are not delivered yet "
                f"({why}); the batch is decided and stays in doubt: the next "
                f"commit, the restart or twopc recover of the write sends those again, with their keys")
        return [CommitOutcome.COMMITTED if o is None else o for o in outcomes]

    def abort(self, handle: HttpHandle) -> None:
        """Delete the outbox: nothing of it was sent.

        Raises:
            ProtocolError: its delivery had started or ended (it was decided).
        """
        txn_id = self._txn_id(handle)
        if not self.outboxes.discard(txn_id):
            raise ProtocolError(f"cannot abort {txn_id}: its delivery has started (it was committed)")

    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> Sequence[HttpHandle]:
        return [HttpHandle(x.path_name, x.sink_id, x.batch_id, x.partition_id, x.attempt_id,
                           outbox=self.outboxes.location) for x in self.outboxes.pending(sink_id, batch_id)]

    def prepared_details(self, sink_id: str) -> list[PreparedDetail]:
        """Each undelivered outbox with its requests; once its delivery started, the keys not yet
        acknowledged (what a server ignoring keys may apply twice)."""
        out = []
        for h in self.list_prepared(sink_id):
            if (box := self.outboxes.read(h.txn_id)) is None:
                continue
            acked = self.outboxes.acknowledged(h.txn_id)
            total = len(box.requests)
            if acked is None:
                holds, size = f"outbox of {total} request(s), none sent", total
            else:
                keys = [r[0] for i, r in enumerate(box.requests) if i not in acked]
                shown = ", ".join(keys[:SHOWN_KEYS]) + (f" and {len(keys) - SHOWN_KEYS} more"
                                                        if len(keys) > SHOWN_KEYS else "")
                holds = (f"outbox of {total} request(s), {len(acked)} acknowledged; "
                         f"unacknowledged keys: {shown or 'none'}")
                size = len(keys)
            out.append(PreparedDetail(h, holds, box.header.get("created"), size, "requests"))
        return out

    def purge_markers(self, sink_id: str, below_batch: int) -> int:
        return self.outboxes.purge(lambda xid: xid.sink_id == sink_id and xid.batch_id < below_batch)

