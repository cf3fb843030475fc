"""The Redis sink: the two-phase-commit protocol on top of the mapping and the library.

How a transaction travels (``T`` is the sink's hash tag, ``P`` = ``T:<sink_id>``, ``<txn>`` the transaction id
``twopc:{sink}:{batch}:{partition}:{attempt}:{nonce}``)::

    executor  pre_commit: ZADD P:txns <batch> <txn>           register (open)
                          FCALL stage -> RPUSH P:staging:<txn>  the writes, in packed groups
                          FCALL prepare                         checks, then HSET P:prepared
    driver    commit:     FCALL commit_batch: every transaction of the batch in one atomic
                          server-side call (per hash tag); commit() alone: FCALL commit
                            marker in P:committed?  -> ALREADY_COMMITTED
                            neither prepared nor marker -> LOST
                            check the TYPE of every target key (and counter values)
                            apply the staged writes in chunks of <= 1000 arguments
                            ZADD P:committed <batch> <txn>; delete the staging
              abort:      FCALL abort: delete staging, prepared entry and registration

``P:txns`` (live transactions) and ``P:committed`` (markers, never a TTL) are sorted sets scored by batch id, so
listing needs no SCAN. :meth:`twopc.Xid.parse` also reads the ids ``{sink}~{batch}~{partition}~{attempt}~{nonce}`` of
versions before 0.2 (still committable and abortable); the server-side steps treat an id as an opaque string, checked
(:meth:`twopc.Xid.checked`) before it reaches Redis.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import redis.exceptions as rex

from twopc import (
    CommitOutcome,
    CommitShape,
    ConfigurationError,
    SinkError,
    TransactionContext,
    TransactionHandle,
    TwoPhaseCommitSink,
    Xid,
    faultinject,
)
from twopc.spi import (
    BatchCommit,
    Headroom,
    Inspectable,
    MarkerPurge,
    MissingOptionError,
    NamedTarget,
    OwnerRecord,
    PreparedDetail,
    ProtocolError,
    TargetConfigurationError,
    WriteSetup,
)

from .._handles import RedisHandle
from .._options import Duration, OptionReader
from .._redis.clients import ClientConfig, split_url
from .._redis.stream_server import StreamServer
from .._secrets import credential_free, redacted_errors
from . import _lua as lua
from ._acks import AckSpec, batch_acks
from ._dead_letter import RowFolder, dead_letter_op
from ._fold import RedisTxn, batch_columns, fold, row_columns, staging_elements
from ._keys import RedisKeys, default_hash_tag, key_slot, normalize_tag, slot_message
from ._mapping import RedisOp, check_schema, compile_mapping
from ._server import RedisServer, RedisTargetError, check_reply
from ._templates import as_text

__all__ = ["FORMAT_NAME", "OPTIONS", "RedisHandle", "RedisSink", "RedisTargetError"]

log = logging.getLogger("twopc.sinks.redis")


FORMAT_NAME = "twopc-redis"

#: The options of ``format("twopc-redis")``, as spelled in the docs (keys are case-insensitive).
OPTIONS = ("url", "password", "mapping", "hashTag", "requireSameSlot", "durability", "skipConfigCheck",
           "scriptMode", "socketTimeout", "connectTimeout", "deadLetterStream", "ackGroup", "ackStreamColumn",
           "ackIdColumn")

DEFAULT_SOCKET_TIMEOUT = Duration(60_000)
DEFAULT_CONNECT_TIMEOUT = Duration(10_000)


class RedisSink(TwoPhaseCommitSink[dict[str, Any], RedisTxn, RedisHandle], WriteSetup, BatchCommit, Inspectable,
                MarkerPurge, NamedTarget):
    """Exactly-once Redis writes (see :mod:`twopc.sinks.redis` for the mapping).

    The arguments are the options of ``format("twopc-redis")`` (the options reference describes each) in snake case:
    *mapping* as ops or JSON text, a password in *url* moved out of it (*password* overrides it), *hash_tag* ``{x}``
    or ``x`` (default ``{twopc:<sink id>}``), the timeouts in seconds or a :class:`~twopc.sinks._options.Duration`,
    and *ack* option ``ackGroup`` with its columns (:mod:`._acks`).

    It raises ConfigurationError for an invalid argument, holds configuration only (pickled to executors; connections
    are pooled per process), and a method that reaches the server raises SinkError (SinkUnavailableError: unreachable)
    when it fails.
    """

    __handle_type__ = RedisHandle

    def __init__(self, url: str, mapping: Sequence[RedisOp] | str, *, password: str | None = None,
                 hash_tag: str | None = None, require_same_slot: bool | str = "auto",
                 durability: str = "always", skip_config_check: bool = False,
                 script_mode: str = "auto", socket_timeout: float | Duration = DEFAULT_SOCKET_TIMEOUT,
                 connect_timeout: float | Duration = DEFAULT_CONNECT_TIMEOUT,
                 dead_letter_stream: str | None = None, ack: AckSpec | None = None) -> None:
        if not url:
            raise MissingOptionError('RedisSink needs option url, e.g. "redis://host:6379/0"')
        clean_url, url_password = split_url(url)
        self._ops, self._compiled = compile_mapping(mapping)
        self._dead = None if dead_letter_stream is None else dead_letter_op(dead_letter_stream, len(self._compiled))
        self._all_compiled = self._compiled + ([self._dead] if self._dead is not None else [])
        self._hash_tag = normalize_tag(hash_tag) if hash_tag else None
        self._same_slot = _same_slot(require_same_slot)
        self._durability = _one_of("durability", durability, ("always", "everysec"))
        self._skip_config_check = bool(skip_config_check)
        mode = _one_of("scriptMode", script_mode, ("auto", "function", "eval"))
        config = ClientConfig(clean_url, password if password is not None else url_password,
                              _timeout_seconds("socketTimeout", socket_timeout),
                              _timeout_seconds("connectTimeout", connect_timeout))
        self._server = RedisServer(config, None if mode == "auto" else mode)
        self._ack = ack

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> RedisSink:
        """The sink of Spark's options; MissingOptionError (``url``, ``mapping``) or ConfigurationError
        for an invalid or unknown one (listing the supported), never showing the password."""
        with redacted_errors(options):
            o = OptionReader(options, FORMAT_NAME)
            for name in OPTIONS:  # claim them all first, so a typo is named before anything else
                o.get(name)
            o.refuse_unknown()
            return cls(
                o.required("url", '.option("url", "redis://host:6379/0")'),
                o.required("mapping", 'a JSON list of ops: .option("mapping", '
                                      '\'[{"op": "INCRBY", "key": "{{app}}:rows", "by": 1}]\')'),
                password=o.get("password"), hash_tag=o.text("hashTag"),
                require_same_slot=o.text("requireSameSlot", "auto") or "auto",
                durability=o.text("durability", "always") or "always",
                skip_config_check=o.boolean("skipConfigCheck", False),
                script_mode=o.text("scriptMode", "auto") or "auto",
                socket_timeout=o.duration("socketTimeout", DEFAULT_SOCKET_TIMEOUT),
                connect_timeout=o.duration("connectTimeout", DEFAULT_CONNECT_TIMEOUT),
                dead_letter_stream=o.get("deadLetterStream"),
                ack=AckSpec.from_options(o.text("ackGroup"), o.text("ackStreamColumn"), o.text("ackIdColumn")))

    reopen_options = staticmethod(credential_free)  #: the options without a secret, as checkpoints record them

    @property
    def ops(self) -> list[RedisOp]:
        """The mapping."""
        return list(self._ops)

    def claim_sink_id(self, sink_id: str, owner: str) -> OwnerRecord | None:
        """``SET P:owner <owner> NX`` (no expiry), then the recorded owner when it is another."""
        key = self.keys_for(sink_id).owner
        recorded = self._server.config.call(f"record the owner of sink id {sink_id!r}",
                                            lambda c: None if c.set(key, owner, nx=True) else c.get(key))
        if recorded is None or as_text(recorded) == owner:
            return None
        return OwnerRecord(as_text(recorded), f"redis-cli -u redis://{self._server.config.where()} DEL '{key}'")

    def target_identity(self) -> str:
        """``redis <host>:<port>/<db> keys <key templates>`` (and the hash tag when set), no password."""
        keys = ", ".join(sorted({op.key for op in self._ops}))
        tag = f" hashTag {self._hash_tag}" if self._hash_tag else ""
        return f"redis {self._server.config.where()} keys {keys}{tag}"

    def describe(self) -> str:
        """``Redis <url without password>``."""
        return f"Redis {self._server.config.url}"

    def close(self) -> None:
        """Nothing to release: :func:`~twopc.sinks.redis.dispose_clients` closes the pooled connections."""

    def hash_tag(self, sink_id: str) -> str:
        """The hash tag of *sink_id*'s keys (``{...}``)."""
        return self._hash_tag or default_hash_tag(sink_id)

    def keys_for(self, sink_id: str, tag: str | None = None) -> RedisKeys:
        """The sink's own keys for *sink_id* (under *tag*, default :meth:`hash_tag`)."""
        return RedisKeys.of(sink_id, tag or self.hash_tag(sink_id))

    def check_same_slot(self, key: str, sink_id: str, op: str = "") -> None:
        """Raise :class:`~twopc.ConfigurationError` when *key* is outside the slot of *sink_id*'s hash tag."""
        tag = self.hash_tag(sink_id)
        if key_slot(key) != key_slot(tag):
            raise ConfigurationError(slot_message(f"target key {key!r}", key_slot(key), tag, op,
                                                  tag_option_set=self._hash_tag is not None))

    def _check_fixed_slots(self, tag: str) -> None:
        want = key_slot(tag)
        for c in self._all_compiled:
            got = c.key.fixed_slot()
            if got is not None and got != want and c is self._dead:
                raise ConfigurationError(
                    f"deadLetterStream {c.key.constant!r} hashes to cluster slot {got}, but the sink's keys use "
                    f"hash tag {tag} (slot {want}): the dead letters commit with the batch, in one slot. Put the "
                    f"hash tag into the key, e.g. \"{tag}:dead\"")
            if got is not None and got != want:
                raise ConfigurationError(slot_message(f"key template {c.op.key!r}", got, tag, c.what,
                                                      tag_option_set=self._hash_tag is not None))

    def _slot_check_on(self) -> bool:
        return self._same_slot if self._same_slot is not None else self._server.config.pooled().cluster

    def validate(self, schema: pa.Schema) -> None:
        """Check the mapping against *schema* and the server's configuration; load the library.

        Raises:
            SchemaMismatchError: a referenced column is missing, or of a type its op cannot take.
            TargetConfigurationError: persistence or eviction unsafe, or ``ackGroup`` without FUNCTION.
            ConfigurationError: a fixed-slot key template outside the sink's slot, or a cluster without hashTag.
        """
        check_schema(self._compiled, schema)
        if self._ack is not None:
            self._ack.check_schema(schema)
        self._server.config.call("connect", lambda c: c.ping())
        self._server.check_config(durability=self._durability, skip=self._skip_config_check)
        if self._slot_check_on():
            if self._hash_tag is None and self._server.config.pooled().cluster:
                raise ConfigurationError(
                    f"Redis at {self._server.config.where()} is a cluster: set option hashTag (e.g. \"shop\") and put "
                    f"it into every key template (\"{{{{shop}}}}:orders\") so each commit touches one slot")
            if self._hash_tag is not None:
                self._check_fixed_slots(self._hash_tag)
        if self._ack is not None and self._server.script_mode() != "function":
            raise TargetConfigurationError(
                f"ackGroup needs Redis 7 or newer (FUNCTION): Redis at {self._server.config.where()} runs scripts in "
                f"eval mode; upgrade Redis, or drop ackGroup (twopc-redis-stream then acknowledges after the commit)")
        self._server.load()

    def begin_transaction(self, context: TransactionContext) -> RedisTxn:
        """Open a transaction in memory (nothing reaches Redis before :meth:`pre_commit`);
        ConfigurationError for a fixed-slot key template outside the sink's slot."""
        tag = self.hash_tag(context.sink_id)
        if self._slot_check_on():
            self._check_fixed_slots(tag)
        return RedisTxn(context, str(context.xid()), tag, [{} for _ in self._all_compiled])

    def invoke(self, txn: RedisTxn, value: dict[str, Any]) -> None:
        """Add one row (column -> value); ConfigurationError for a missing or null column, a value of
        the wrong type for its op, a key outside the slot, or two ops writing one key."""
        if self._ack is not None:
            self._ack.track(txn.acks, [value.get(self._ack.stream_column)], [value.get(self._ack.id_column)])
        self._folder().fold(txn, row_columns(self._compiled, value), list(value), 1, lambda: [dict(value)])

    def invoke_batch(self, txn: RedisTxn, batch: pa.RecordBatch) -> None:
        """Add an Arrow record batch; raises as :meth:`invoke` (SchemaMismatchError: a missing column)."""
        if self._ack is not None:
            self._ack.track(txn.acks, batch.column(self._ack.stream_column).to_pylist(),
                            batch.column(self._ack.id_column).to_pylist())
        self._folder().fold(txn, batch_columns(self._compiled, batch), list(batch.schema.names), batch.num_rows,
                        batch.to_pylist)

    def _folder(self) -> RowFolder:
        return RowFolder(self._compiled, self._fold, self._dead)

    def _fold(self, txn: RedisTxn, cols: Mapping[str, list[Any]], all_columns: list[str], n: int) -> None:
        fold(self._compiled, txn, cols, all_columns, n, slot_check=self._slot_check_on(),
             tag_option_set=self._hash_tag is not None)

    def pre_commit(self, txn: RedisTxn) -> RedisHandle:
        """Stage the writes durably and mark the transaction prepared (:meth:`RedisServer.stage`); a staging call is
        refused once the transaction was rolled back, so a zombie attempt cannot re-create staging.

        Raises:
            RedisTargetError: a target key has the wrong type or a counter a non-integer value.
            ConfigurationError: a counter's deltas exceed +-10^18, or a source stream has no
                group ``ackGroup`` (before anything reaches Redis).
            SinkError: the transaction was rolled back meanwhile.
        """
        ctx = txn.context
        if self._slot_check_on():
            for stream in txn.acks:
                self.check_same_slot(stream, ctx.sink_id, op=f"ackGroup stream {stream!r}")
        if self._ack is not None:
            self._ack.check_groups(StreamServer(self._server.config), txn.acks)
        elements = staging_elements(self._all_compiled, txn.state)
        keys = self.keys_for(ctx.sink_id, txn.tag)
        txn.registered = True
        reply = self._server.stage(keys, txn.txn_id, ctx.batch_id, elements,
                                   start_over=lambda: self._abort_keys(keys, txn.txn_id))
        check_reply(reply, txn.txn_id, "prepare")
        txn.prepared = True
        return RedisHandle(txn.txn_id, ctx.sink_id, ctx.batch_id, ctx.partition_id, ctx.attempt_id,
                           hash_tag=txn.tag, staged=len(elements),
                           acks=tuple(sorted((s, str(e)) for s, e in txn.acks.items())))

    def rollback(self, txn: RedisTxn) -> None:
        """Discard an open transaction and what it staged; never raises (a failure is logged,
        recovery removes the staging later through :meth:`list_prepared`)."""
        txn.clear()
        if not txn.registered:
            return
        try:
            self._abort_keys(self.keys_for(txn.context.sink_id, txn.tag), txn.txn_id)
        except SinkError as exc:
            log.warning("twopc redis: could not roll back %s (recovery will): %s", txn.txn_id, exc)

    def _handle_keys(self, handle: TransactionHandle) -> RedisKeys:
        if not isinstance(handle, RedisHandle):
            raise ProtocolError(f"RedisSink got a {type(handle).__name__}, not a RedisHandle")
        xid = Xid.parse(Xid.checked(handle.txn_id, what="twopc Redis transaction id"))
        fields = (handle.sink_id, handle.batch_id, handle.partition_id, handle.attempt_id)
        if xid is None or (xid.sink_id, xid.batch_id, xid.partition_id, xid.attempt_id) != fields:
            raise ProtocolError(f"handle txn_id {handle.txn_id!r} does not match the handle's sink, batch, "
                                f"partition and attempt {fields}: the ledger record is damaged")
        if handle.hash_tag and not re.fullmatch(r"\{[^{}]+\}", handle.hash_tag):  # as normalize_tag writes one
            raise ProtocolError(f"handle hash_tag {handle.hash_tag!r:.80} is not a Redis hash tag {{...}}")
        return self.keys_for(handle.sink_id, handle.hash_tag or None)

    def commit(self, handle: RedisHandle) -> CommitOutcome:
        """Commit in one atomic server-side call: ``COMMITTED``, ``ALREADY_COMMITTED`` (the marker
        exists) or ``LOST`` (neither prepared staging nor marker).

        Raises:
            RedisTargetError: a target key has the wrong type (or a counter a non-integer);
                nothing was applied and the staging is kept for a retry once the key is fixed.
            ProtocolError: the handle is malformed or the transaction was never prepared.
        """
        keys = self._handle_keys(handle)
        reply = self._server.run("commit", [keys.txns, keys.prepared, keys.staging(handle.txn_id), keys.committed],
                                 [handle.txn_id, handle.batch_id], f"commit {handle.txn_id}")
        if reply[0] not in ("ALREADY", "LOST"):
            check_reply(reply, handle.txn_id, "commit")
        return self._outcome(handle.txn_id, reply[0])

    def commit_all(self, handles: Sequence[RedisHandle], *, recovering: bool = False) -> list[CommitOutcome]:
        """Commit a decided batch in one atomic call (``commit_batch``), so a reader sees all of
        it or none; one call per hash tag and per :data:`~._lua.MAX_BATCH_TXNS` transactions,
        fault point ``between_commits`` between two calls. Returns one outcome per handle, in
        order; raises as :meth:`commit` (nothing of a failing call is applied)."""
        groups: dict[RedisKeys, list[int]] = {}
        for i, h in enumerate(handles):
            groups.setdefault(self._handle_keys(h), []).append(i)
        calls = [(keys, idx[j: j + lua.MAX_BATCH_TXNS]) for keys, idx in groups.items()
                 for j in range(0, len(idx), lua.MAX_BATCH_TXNS)]
        outcomes: list[CommitOutcome | None] = [None] * len(handles)
        acks = batch_acks(handles) if self._ack is not None else []
        for n, (keys, idx) in enumerate(calls):
            if n == 1:
                faultinject.fault_point("between_commits", batch_id=handles[0].batch_id)
            txn_ids = [handles[i].txn_id for i in idx]
            base = [keys.txns, keys.prepared, keys.committed, *(keys.staging(t) for t in txn_ids)]
            what = f"commit {len(txn_ids)} transaction(s)"
            if acks and n == len(calls) - 1:  # the last call: every other call of the batch has committed
                assert self._ack is not None
                reply = self._server.run("commit_batch_ack", [*base, *(s for s, _ in acks)],
                                         [handles[idx[0]].batch_id, *txn_ids, self._ack.group,
                                          *(i for _, i in acks), len(acks)], what + " and acknowledge their entries")
            else:
                reply = self._server.run("commit_batch", base, [handles[idx[0]].batch_id, *txn_ids], what)
            if reply[0] == "FAILED":
                check_reply(reply[2:], reply[1], "commit")
            if reply[0] != "DONE" or len(reply) != len(idx) + 1 or not set(reply[1:]) <= set(_BATCH_OUTCOMES):
                raise SinkError(f"cannot commit {txn_ids[0]}..: unexpected reply {reply!r:.200}")
            for i, status in zip(idx, reply[1:], strict=True):
                outcomes[i] = self._outcome(handles[i].txn_id, status)
        return [o for o in outcomes if o is not None]

    def _outcome(self, txn_id: str, status: str) -> CommitOutcome:
        if status == "LOST":
            log.error("twopc redis: %s is neither prepared nor committed on %s", txn_id, self._server.config.where())
        return _BATCH_OUTCOMES[status]

    def commit_shape(self, handles: Sequence[RedisHandle] = ()) -> CommitShape:
        """``ONE_CALL`` when *handles* share one hash tag and fit one call, else ``WHOLE_BATCH``
        (:meth:`commit_all` fires ``between_commits`` itself)."""
        one = len({self._handle_keys(h) for h in handles}) <= 1 and len(handles) <= lua.MAX_BATCH_TXNS
        return CommitShape.ONE_CALL if one else CommitShape.WHOLE_BATCH

    def _abort_keys(self, keys: RedisKeys, txn_id: str) -> bool:
        """Delete *txn_id*'s staging (True when it existed); ProtocolError when it was committed."""
        reply = self._server.run("abort", [keys.txns, keys.prepared, keys.staging(txn_id), keys.committed],
                                 [txn_id], f"roll back {txn_id}")
        if reply[0] == "COMMITTED":
            raise ProtocolError(f"asked to roll back {txn_id}, but it was already committed to "
                                f"{self._server.config.where()} (its commit marker exists)")
        return reply[0] == "ABORTED" and int(reply[1]) > 0

    def abort(self, handle: RedisHandle) -> None:
        """Delete the transaction's staging, prepared entry and registration (idempotent);
        ProtocolError when it had been committed, or the handle is malformed."""
        self._abort_keys(self._handle_keys(handle), handle.txn_id)

    def list_prepared(self, sink_id: str, batch_id: int | None = None) -> list[RedisHandle]:
        """Registered transactions of *sink_id* (and *batch_id*) neither committed nor rolled back,
        those that died while staging included; ``txn_id`` as registered, ``staged`` -1."""
        keys = self.keys_for(sink_id)
        lo, hi = ("-inf", "+inf") if batch_id is None else (batch_id, batch_id)
        members = self._server.config.call("list prepared transactions", lambda c: c.zrangebyscore(keys.txns, lo, hi))
        out = []
        for m in members:
            txn_id = as_text(m)
            xid = Xid.parse(txn_id)
            if xid is None or xid.sink_id != sink_id:
                log.warning("twopc redis: ignoring malformed transaction id %r in %s", txn_id, keys.txns)
                continue
            out.append(RedisHandle(txn_id, xid.sink_id, xid.batch_id, xid.partition_id, xid.attempt_id,
                                   hash_tag=self.hash_tag(sink_id), staged=-1))
        return sorted(out, key=lambda h: (h.batch_id, h.txn_id))

    def prepared_details(self, sink_id: str) -> list[PreparedDetail]:
        """:meth:`list_prepared` with each staged element count (unknown while staging) and the
        staging list's idle time (``OBJECT IDLETIME``; unknown under an LFU eviction policy)."""
        keys = self.keys_for(sink_id)
        client = self._server.config.pooled().client
        now = time.time()
        out = []
        try:
            for h in self.list_prepared(sink_id):
                count = client.hget(keys.prepared, h.txn_id)
                try:
                    idle = client.object("idletime", keys.staging(h.txn_id))
                except rex.ResponseError:  # an LFU maxmemory-policy keeps no idle time
                    idle = None
                out.append(PreparedDetail(h, "staging list", None if idle is None else now - float(idle),
                                          None if count is None else int(count), "elements"))
        except rex.RedisError as exc:
            raise self._server.config.error(exc, "read prepared transactions") from None
        return out

    def headroom(self, sink_id: str) -> Headroom:
        """*sink_id*'s staging keys (``ZCARD P:txns``; every sink's would need a SCAN); no limit but memory."""
        n = self._server.config.call("count staging keys", lambda c: c.zcard(self.keys_for(sink_id).txns))
        return Headroom("staging keys of this sink", int(n), None)

    def commit_mode(self) -> str:
        """One Redis FUNCTION (or Lua script) call per batch, markers included."""
        how = {"function": "FUNCTION", "eval": "EVALSHA"}.get(self._server.mode or "", "FUNCTION/EVALSHA")
        return (f"RedisSink: prepared staging lists; a batch is committed by one atomic {how} call with its "
                f"markers (one per hash tag and per {lua.MAX_BATCH_TXNS} transactions)")

    def purge_markers(self, sink_id: str, below_batch: int) -> int:
        """Delete the markers of *sink_id*'s batches ``< below_batch``; returns how many."""
        keys = self.keys_for(sink_id)
        return int(self._server.config.call("purge commit markers", lambda c: c.zremrangebyscore(
            keys.committed, "-inf", f"({int(below_batch)}")))

    def is_committed(self, handle: RedisHandle) -> bool:
        """True when the handle's commit marker exists."""
        keys = self._handle_keys(handle)
        marker = self._server.config.call("read commit markers", lambda c: c.zscore(keys.committed, handle.txn_id))
        return marker is not None


_BATCH_OUTCOMES = {"COMMITTED": CommitOutcome.COMMITTED, "ALREADY": CommitOutcome.ALREADY_COMMITTED,
                   "LOST": CommitOutcome.LOST}


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> str:
    """*value* (case-insensitive) when it is one of *allowed*, else ConfigurationError naming option *name*."""
    v = value.strip().lower()
    if v not in allowed:
        raise ConfigurationError(f"{name} must be {', '.join(allowed[:-1])} or {allowed[-1]}, got {value!r}")
    return v


def _same_slot(value: bool | str) -> bool | None:
    """``requireSameSlot``: None for auto, else a boolean (the words OptionReader takes)."""
    if not isinstance(value, str):
        return bool(value)
    if value.strip().lower() == "auto":
        return None
    try:
        return OptionReader({"requireSameSlot": value}, FORMAT_NAME).boolean("requireSameSlot", False)
    except ConfigurationError:
        raise ConfigurationError(f"requireSameSlot must be auto, true or false, got {value!r}") from None


def _timeout_seconds(name: str, value: float | Duration) -> float:
    """A timeout in seconds, > 0."""
    d = Duration.parse(value, name)
    if d.ms <= 0:
        raise ConfigurationError(f"{name} must be > 0, got {value!r}")
    return d.seconds
