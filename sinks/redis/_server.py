"""The Redis server as the sink sees it: configuration checks, the server-side library
(loaded once per process and server, again when the server lost it), running its steps."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis.exceptions as rex

from twopc import SinkError
from twopc.spi import ProtocolError, TargetConfigurationError

from .._redis.clients import ClientConfig, Pooled
from .._redis.library import missing_library
from . import _lua as lua
from ._keys import RedisKeys
from ._mapping import COUNTER_LIMIT
from ._templates import as_text

__all__ = ["RedisServer", "RedisTargetError", "check_reply", "decode_reply", "run_pipeline"]

log = logging.getLogger("twopc.sinks.redis")

_FIX_AOF = "CONFIG SET appendonly yes; CONFIG SET appendfsync always; CONFIG REWRITE (or set them in redis.conf)"


@dataclass
class RedisServer:
    """One Redis server (or cluster) of a sink, pickled with it; *mode* is ``function`` or ``eval``
    (None until asked)."""

    config: ClientConfig
    mode: str | None = None

    def check_config(self, *, durability: str, skip: bool) -> None:
        """TargetConfigurationError unless the server persists every write (every second with
        *durability* ``everysec``) and never evicts keys, or CONFIG is unavailable without *skip*."""
        if skip:
            log.warning("twopc redis: skipConfigCheck=true: not checking persistence and eviction of %s",
                        self.config.where())
            return
        aof, fsync, policy = (self._config_get(name) for name in ("appendonly", "appendfsync", "maxmemory-policy"))
        if policy.startswith("allkeys-"):
            raise TargetConfigurationError(
                f"Redis at {self.config.where()} has maxmemory-policy {policy}: it may evict twopc's commit markers "
                "and prepared staging, which would turn committed batches into 'lost' ones and lose prepared writes. "
                "Set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf)")
        if aof != "yes":
            raise TargetConfigurationError(
                f"Redis at {self.config.where()} has appendonly {aof}: prepared transactions and commit markers would "
                f"not survive a restart. Enable the append-only file with fsync on every write: {_FIX_AOF}")
        if fsync == "always":
            return
        if durability == "everysec" and fsync == "everysec":
            log.warning("twopc redis: %s uses appendfsync everysec (accepted by durability=everysec): an OS "
                        "crash or power loss can lose about 1 s of acknowledged writes, including prepared "
                        "staging and commits", self.config.where())
            return
        raise TargetConfigurationError(
            f"Redis at {self.config.where()} has appendfsync {fsync}: an OS crash could lose acknowledged prepared "
            f"transactions or commits. Set appendfsync always ({_FIX_AOF}), or accept about 1 s of loss with "
            f"appendfsync everysec and option durability=everysec")

    def _config_get(self, name: str) -> str:
        try:
            got = self.config.pooled().client.config_get(name)
        except rex.ResponseError as exc:
            raise TargetConfigurationError(
                f"Redis at {self.config.where()} does not allow CONFIG GET ({self.config.redact(str(exc))}), as "
                f"managed services often do: twopc cannot check that it persists every write (appendonly yes, "
                f"appendfsync always) and never evicts keys (maxmemory-policy noeviction). Check both "
                f"with your provider, then set option skipConfigCheck=true to proceed") from None
        except rex.RedisError as exc:
            raise self.config.error(exc, "read its configuration") from None
        raw = got.get(name) if name in got else got.get(name.encode(), b"")
        return as_text(raw or "").lower()

    def script_mode(self) -> str:
        """``function`` (Redis 7+) or ``eval``: asks the server's version the first time."""
        if self.mode is None:
            version = str(self.config.call("read INFO server", lambda c: c.info("server")).get("redis_version", "0"))
            major = version.split(".")[0]
            self.mode = "function" if major.isdigit() and int(major) >= 7 else "eval"
        return self.mode

    def load(self, *, force: bool = False) -> None:
        """``FUNCTION LOAD REPLACE`` the three libraries on every primary, or ``SCRIPT LOAD`` the
        scripts in eval mode (once per process and server, unless *force*)."""
        mode = self.script_mode()

        def load(pooled: Pooled) -> None:
            if mode == "function":
                codes = (lua.library_code(), lua.batch_library_code(), lua.ack_library_code())
                pooled.on_every_primary(lambda node: [node.function_load(code, replace=True) for code in codes])
            else:
                for name in (*lua.FUNCTIONS, *lua.BATCH_FUNCTIONS):
                    pooled.client.script_load(lua.script_code(name))

        self.config.load_once(mode, load, f"load the {lua.LIBRARY_NAME} server-side library", force=force)

    def command(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> tuple[Any, ...]:
        """The command that runs server-side step *name*: ``FCALL``, or ``EVALSHA`` in eval mode."""
        if name == "commit_batch_ack" or self.script_mode() == "function":  # validate refuses ackGroup in eval mode
            return ("FCALL", lua.function_name(name), len(keys), *keys, *args)
        return ("EVALSHA", lua.script_sha(name), len(keys), *keys, *args)

    def run(self, name: str, keys: Sequence[str], args: Sequence[Any], action: str) -> list[str]:
        """Run one server-side step, loading the library again when the server lost it."""
        client = self.config.pooled().client
        return decode_reply(self.config.with_library(
            self.load, lambda: client.execute_command(*self.command(name, keys, args)), action, "server-side library"))

    def stage(self, keys: RedisKeys, txn_id: str, batch_id: int, elements: Sequence[Any], *,
              start_over: Callable[[], object]) -> list[str]:
        """In one pipeline: register *txn_id* (``ZADD P:txns``), push *elements* one ``stage`` call each (an
        element packs thousands of arguments), ``prepare`` it; returns the ``prepare`` reply, or SinkError when it
        was rolled back meanwhile. When the server lost the library, *start_over* removes what got staged and it
        runs once more."""
        staging = keys.staging(txn_id)
        client = self.config.pooled().client
        self.load()
        for attempt in (0, 1):
            pipe = [("ZADD", keys.txns, "NX", batch_id, txn_id),
                    *(self.command("stage", [keys.txns, staging], [txn_id, element]) for element in elements),
                    self.command("prepare", [keys.txns, keys.prepared, staging], [txn_id, len(elements)])]
            try:
                replies = run_pipeline(client, pipe)
            except rex.RedisError as exc:
                raise self.config.error(exc, f"stage transaction {txn_id}") from None
            errors = [r for r in replies if isinstance(r, Exception)]
            if errors and attempt == 0 and any(missing_library(e) for e in errors):
                start_over()
                self.load(force=True)
                continue
            if errors:
                raise self.config.error(errors[0], f"stage transaction {txn_id}")
            if any(decode_reply(r)[0] != "OK" for r in replies[1:-1]):
                raise SinkError(f"transaction {txn_id} was rolled back while it was being staged "
                                f"(recovery treated this attempt as an orphan); the task can be retried")
            return decode_reply(replies[-1])
        raise AssertionError("unreachable: the second attempt returns or raises")


def run_pipeline(client: Any, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Send *commands* in one round trip, redis-py's non-transactional pipeline (re-sent per the client's
    retry policy); one reply per command, an error reply as its ResponseError in its slot."""
    pipe = client.pipeline(transaction=False)
    for cmd in commands:
        pipe.execute_command(*cmd)
    return cast("list[Any]", pipe.execute(raise_on_error=False))


def decode_reply(reply: Any) -> list[str]:
    """A step's reply as a list of strings (anything else as ``[repr]``)."""
    if not isinstance(reply, list | tuple) or not reply:
        return [repr(reply)]
    return [as_text(x) for x in reply]


class RedisTargetError(SinkError):
    """A target key cannot take the op (wrong Redis type, or a counter not an integer within
    +-10^18); nothing was applied, the staging is kept. Attributes: ``key``, ``redis_type``
    (as TYPE reports it), ``op``, ``field`` (HINCRBY)."""

    def __init__(self, message: str, *, key: str, redis_type: str, op: str, field: str = "") -> None:
        super().__init__(message)
        self.key, self.redis_type, self.op, self.field = key, redis_type, op, field


def check_reply(reply: list[str], txn_id: str, step: str) -> None:
    """Raise for a ``prepare``/``commit`` reply other than PREPARED or COMMITTED: RedisTargetError
    (WRONGTYPE, NOTINT), ProtocolError (never prepared), else SinkError."""
    status = reply[0]
    if status in ("PREPARED", "COMMITTED"):
        return
    if status == "WRONGTYPE":
        key, actual, op, want = reply[1], reply[2], reply[3], reply[4]
        raise RedisTargetError(
            f"cannot {step} {txn_id}: target key {key!r} is a Redis {actual}, but {op} needs a {want} (or no "
            f"key); nothing was applied. Delete or rename the key, or change the mapping",
            key=key, redis_type=actual, op=op)
    if status == "NOTINT":
        key, fld, op = reply[1], reply[2], reply[3]
        where = f"field {fld!r} of hash {key!r}" if fld else f"key {key!r}"
        raise RedisTargetError(
            f"cannot {step} {txn_id}: {where} does not hold an integer within +-{COUNTER_LIMIT}, so {op} could "
            f"fail; nothing was applied. Fix or delete the value", key=key,
            redis_type="hash" if fld else "string", op=op, field=fld)
    if status == "ABORTED":
        raise SinkError(f"cannot {step} {txn_id}: it was rolled back (recovery treated it as an orphan)")
    if status == "UNPREPARED":
        raise ProtocolError(f"cannot {step} {txn_id}: it was never prepared (its staging is incomplete)")
    if status == "DAMAGED":
        raise SinkError(f"cannot {step} {txn_id}: its staging is damaged ({' '.join(reply[1:])}); nothing was applied")
    raise SinkError(f"cannot {step} {txn_id}: unexpected reply {reply!r}")
