"""The harness: how the kit builds your sink, what rows it writes, how it reads them back."""

from __future__ import annotations

import dataclasses
import secrets
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar

import pyarrow as pa

from .._handle import TransactionHandle
from .._objpath import load_object
from .._runtime_options import RUNTIME_KEYS
from .._sink import TwoPhaseCommitSink, WriteSetup, capability
from .._xid import Xid
from ..spark._spark import TwoPhaseCommitDataSource, data_source_for

__all__ = ["DEFAULT_SCHEMA", "ContractViolation", "HarnessError", "SinkHarness", "default_rows", "derive_secrets",
           "fresh_nonce"]

H = TypeVar("H", bound=TransactionHandle)
AnySink: TypeAlias = TwoPhaseCommitSink[Any, Any, Any]

#: The rows the kit writes unless a harness says otherwise: what ``twopc.recovery.demos.demo`` writes.
DEFAULT_SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string()), ("amount", pa.float64())])

_SECRET_WORDS = ("password", "passwd", "pwd", "secret", "token", "apikey", "api_key", "accesskey",
                 "credential")


class ContractViolation(AssertionError):
    """A sink broke the two-phase-commit contract; ``check`` names the check that found it (an
    ``AssertionError``: pytest shows the message only)."""

    def __init__(self, check: str, message: str) -> None:
        super().__init__(f"[{check}] {message}")
        self.check = check


ContractViolation.__module__ = "twopc.testing"


class HarnessError(Exception):
    """The harness itself is unusable (a class not importable by path, a txn id ``never_prepared``
    cannot remake...): fix the harness, not the sink."""


HarnessError.__module__ = "twopc.testing"


def default_rows(ids: Sequence[int]) -> pa.RecordBatch:
    """Rows of :data:`DEFAULT_SCHEMA` for *ids*: ``(id, "event-<id>", id * 0.5)``."""
    return pa.record_batch({
        "id": pa.array(list(ids), pa.int64()),
        "payload": pa.array([f"event-{i}" for i in ids], pa.string()),
        "amount": pa.array([i * 0.5 for i in ids], pa.float64()),
    }, schema=DEFAULT_SCHEMA)


def fresh_nonce(handle: H) -> H:
    """*handle* with its :class:`~twopc.Xid` ``txn_id`` re-made with a fresh nonce, in the same form
    (the default ``never_prepared``).
    Raises HarnessError: the txn id is not an Xid; give the harness ``never_prepared=``."""
    if (xid := Xid.parse(handle.txn_id)) is None:
        raise HarnessError(
            f"{type(handle).__name__}.txn_id {handle.txn_id!r:.80} is not a twopc Xid, so the kit cannot "
            f"make a never-prepared id for it: give SinkHarness(never_prepared=...) a function that returns "
            f"the handle of a transaction that was never prepared")
    other = xid
    while other.nonce == xid.nonce:
        other = dataclasses.replace(xid, nonce=secrets.token_hex(4))
    text = str(other) if handle.txn_id == str(xid) else other.path_name
    return dataclasses.replace(handle, txn_id=text)


def _url_secrets(value: str) -> set[str]:
    text = value[5:] if value[:5].lower() == "jdbc:" else value
    if "://" not in text and "?" not in text:
        return set()
    try:
        parts = urllib.parse.urlsplit(text)
        password = parts.password
    except ValueError:
        return set()
    found = {password, urllib.parse.unquote(password)} if password else set()
    query = urllib.parse.parse_qsl(parts.query)
    return found | {val for key, val in query if any(w in key.lower() for w in _SECRET_WORDS)}


def derive_secrets(options: Mapping[str, str]) -> list[str]:
    """The credentials in *options*: values of options named like a password, secret or token, and passwords inside
    URLs (``scheme://user:pw@``, ``?password=``), each also URL-quoted; strings under 4 characters are left out."""
    texts = {key: value for key, value in options.items() if isinstance(value, str) and value}
    found = {value for key, value in texts.items() if any(w in key.lower() for w in _SECRET_WORDS)}
    found |= {secret for value in texts.values() for secret in _url_secrets(value)}
    forms = found | {q for s in found for q in (urllib.parse.quote(s, safe=""), urllib.parse.quote_plus(s))}
    return sorted(s for s in forms if len(s) >= 4)


def _load(path: str) -> Any:
    try:
        return load_object(path)
    except ValueError:
        raise HarnessError(f"sink {path!r} is not 'module:Class'") from None
    except (ImportError, AttributeError) as exc:
        raise HarnessError(f"cannot import sink {path!r}: {exc}") from None


def sink_path(sink: str | type[Any]) -> str:
    """``module:Class`` of *sink*, checked to import back to it (other processes import it by path).
    Raises HarnessError: the class lives in ``__main__``, a notebook or a function body."""
    if isinstance(sink, str):
        _load(sink)
        return sink
    path = f"{sink.__module__}:{sink.__qualname__}"
    if sink.__module__ == "__main__" or "<locals>" in sink.__qualname__:
        raise HarnessError(
            f"{sink.__qualname__} is defined in {sink.__module__!r}"
            f"{' (a function body)' if '<locals>' in path else ''}: "
            f"the crash matrix's Spark job is another process, and cloudpickle ships such classes by value "
            f"(hooks like __init_subclass__ do not run there). Move it into an importable module and give "
            f"SinkHarness(sink='package.module:{sink.__name__}')")
    if _load(path) is not sink:
        raise HarnessError(f"{path} imports to another object than {sink!r}")
    return path


def kit_data_source(obj: type[Any], format_name: str | None) -> type[TwoPhaseCommitDataSource]:
    """*obj* if a data source, else one for the sink class (format ``twopc-kit-<class name>`` by default)."""
    if issubclass(obj, TwoPhaseCommitDataSource):
        return obj
    return data_source_for(obj, format_name or f"twopc-kit-{obj.__name__.lower()}")


@dataclass
class SinkHarness:
    """What the kit needs to know about your sink.

    Attributes:
        sink: your ``TwoPhaseCommitSink`` or ``TwoPhaseCommitDataSource`` subclass, or
            ``"package.module:Class"``; importable by that path (the crash matrix runs it elsewhere).
        options: the Spark writer options, secrets included (kept off command lines, logs and
            messages); the runtime's own (``checkpointLocation``, ``sinkId``, ``txnAppId``,
            ``txnVersion``, ``minBatchesToRetain``) are ignored.
        read_ids: the id of every row visible in the target, once per time it is visible.
        schema: the DataFrame schema your sink receives.
        rows: a record batch of *schema* for a list of ids (types Parquet can hold).
        verify: sink-specific checks, called with every sink id a run used; raise to fail it.
        never_prepared: makes a never-prepared handle from a prepared one (default :func:`fresh_nonce`).
        secrets: strings never to appear in a handle, description, error, log line or checkpoint
            (default :func:`derive_secrets` of *options*).
        format_name: the Spark format for a sink class (default ``twopc-kit-<class name>``).
        name: how reports name this harness."""

    sink: str | type[Any]
    options: Mapping[str, str]
    read_ids: Callable[[], Iterable[int]]
    schema: pa.Schema = DEFAULT_SCHEMA
    rows: Callable[[Sequence[int]], pa.RecordBatch] = default_rows
    verify: Callable[[str], None] | None = None
    never_prepared: Callable[[Any], Any] = fresh_nonce
    secrets: Sequence[str] | None = None
    format_name: str | None = None
    name: str = ""
    _resolved: Any = field(default=None, init=False, repr=False)

    def __repr__(self) -> str:  # the options hold secrets: never show them
        return f"SinkHarness({self.label})"

    @property
    def label(self) -> str:
        """The harness's name, or its sink's path."""
        return self.name or (self.sink if isinstance(self.sink, str) else self.sink.__qualname__)

    def _target(self) -> Any:
        if self._resolved is None:
            obj = _load(self.sink) if isinstance(self.sink, str) else self.sink
            if not isinstance(obj, type) or not issubclass(obj, (TwoPhaseCommitSink, TwoPhaseCommitDataSource)):
                raise HarnessError(f"{self.label} is neither a TwoPhaseCommitSink nor a TwoPhaseCommitDataSource")
            self._resolved = obj
        return self._resolved

    def sink_class(self) -> type[AnySink]:
        """The sink class (a data source's ``sink_class``)."""
        obj = self._target()
        return obj.sink_class if issubclass(obj, TwoPhaseCommitDataSource) else obj  # type: ignore[no-any-return]  # imported by path: Any

    def data_source(self) -> type[TwoPhaseCommitDataSource]:
        """The harness's data source, or one made with :func:`twopc.data_source_for`."""
        return kit_data_source(self._target(), self.format_name)

    def sink_path(self) -> str:
        """``module:Class`` of the sink (or data source), checked to be importable."""
        return sink_path(self.sink)

    def sink_options(self) -> dict[str, str]:
        """*options* without the runtime's keys."""
        return {k: v for k, v in self.options.items() if k.lower() not in RUNTIME_KEYS}

    def new_sink(self) -> AnySink:
        """A sink built as the runtime builds one: ``from_options``, ``configure_write`` (streaming
        append with a checkpoint), ``validate``."""
        sink = self.sink_class().from_options(self.sink_options())
        capability(sink, WriteSetup).configure_write(self.schema, overwrite=False, streaming=True, checkpointed=True)
        capability(sink, WriteSetup).validate(self.schema)
        return sink

    def secret_strings(self) -> list[str]:
        """The strings that must never leak (see *secrets*)."""
        return sorted(set(self.secrets)) if self.secrets is not None else derive_secrets(self.options)
