"""Transaction handles: the small, immutable, credential-free value ``pre_commit`` returns and the
ledger stores, enough (with the sink's options) to commit or roll back the transaction from any
process later. They travel in an envelope ``{"kind", "version", "payload"}``; an unknown kind or
a newer version raises, never guesses. A kind not registered yet is looked up in the entry
points of group ``twopc.handle_kinds`` (``kind = "package.module:HandleClass"``) and in
:data:`BUILT_IN_KINDS`, and its module imported. Subclass :class:`TransactionHandle`::

    @dataclass(frozen=True)
    class FileHandle(TransactionHandle, kind="twopc.file", version=1):
        path: str"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from ._errors import HandleError, HandleVersionError, UnknownHandleKindError

__all__ = ["BUILT_IN_KINDS", "HANDLE_KINDS_GROUP", "TransactionHandle", "decode_handle", "dumps_handle",
           "encode_handle", "loads_handle", "registered_handle_kinds"]

_REGISTRY: dict[str, type[TransactionHandle]] = {}
#: The entry point group naming the module and class of a handle kind (see the module docstring).
HANDLE_KINDS_GROUP = "twopc.handle_kinds"
#: The built-in sinks' kinds and their ``module:Class``, imported when a ledger first holds one.
BUILT_IN_KINDS: Mapping[str, str] = {
    "twopc.postgres": "twopc.sinks._handles:PostgresHandle",
    "twopc.mysql_xa": "twopc.sinks._handles:MySqlXaHandle",
    "twopc.redis": "twopc.sinks._handles:RedisHandle",
    "twopc.staging": "twopc.sinks._handles:StagingHandle",
    "twopc.file": "twopc.sinks._file:FileHandle",
    "twopc.http": "twopc.sinks._handles:HttpHandle",
}
_LOOKUP_LOCK = threading.Lock()
_SCALARS = (str, int, float, bool)

H = TypeVar("H", bound="TransactionHandle")


@dataclass(frozen=True)
class TransactionHandle:
    """Base of every sink's handle: ``txn_id`` (sink-unique: a GID, a file name...), ``sink_id``,
    ``batch_id`` (micro-batch id or ``txnVersion``), ``partition_id`` and ``attempt_id``."""

    txn_id: str
    sink_id: str
    batch_id: int
    partition_id: int
    attempt_id: int

    KIND: ClassVar[str] = ""
    VERSION: ClassVar[int] = 0

    def __init_subclass__(cls, *, kind: str | None = None, version: int = 1, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if kind is None:
            return
        if version < 1:
            raise ValueError(f"handle version must be >= 1, got {version}")
        cls.KIND = kind
        cls.VERSION = version
        _register(cls)

    def covered_txn_ids(self) -> frozenset[str]:
        """The transaction ids a decision naming this handle decides (a composite adds its parts')."""
        return frozenset((self.txn_id,))

    def to_payload(self) -> dict[str, Any]:
        """The JSON-compatible payload (the dataclass fields)."""
        flat = {name: getattr(self, name) for name in _field_names(type(self))}
        if all(v is None or isinstance(v, _SCALARS) for v in flat.values()):
            return flat  # what asdict returns for scalar fields, without its deep copy
        return dataclasses.asdict(self)

    @classmethod
    def from_payload(cls: type[H], payload: Mapping[str, Any], version: int) -> H:
        """Build a handle from a payload of *version* (older ones through :meth:`upgrade`).
        Raises HandleVersionError: *version* is newer than :attr:`VERSION` or cannot be upgraded.
        Raises HandleError: the payload does not have this handle's fields."""
        if version > cls.VERSION:
            raise HandleVersionError(f"handle of kind {cls.KIND!r} has version {version}, but this twopc reads up to "
                                     f"version {cls.VERSION}: upgrade twopc on the driver and the executors")
        if version < cls.VERSION:
            payload = cls.upgrade(dict(payload), version)
        unknown = set(payload) - set(_field_names(cls))
        missing = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING} - set(payload)
        if unknown or missing:
            raise HandleError(f"handle of kind {cls.KIND!r} version {version} has unexpected fields {sorted(unknown)} "
                              f"and lacks {sorted(missing)}: the ledger record is damaged (or was written by another "
                              f"twopc version: use that one); restore it from a backup of the checkpoint, then rerun")
        return cls(**payload)

    @classmethod
    def upgrade(cls, payload: dict[str, Any], version: int) -> dict[str, Any]:
        """Convert a payload of an older *version* to the current one. Default: refuse."""
        raise HandleVersionError(f"handle of kind {cls.KIND!r} version {version} is older than {cls.VERSION} and "
                                 f"{cls.__qualname__} defines no upgrade from it")


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type[TransactionHandle]) -> tuple[str, ...]:
    """*cls*'s field names, cached (:func:`dataclasses.fields` costs more than a payload)."""
    if (names := _FIELD_NAMES.get(cls)) is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _register(cls: type[TransactionHandle]) -> None:
    """Enter *cls* under its ``KIND``; a class of the same module and name (a cloudpickled copy)
    may replace the registered one.
    Raises ValueError: another class already registered the kind."""
    existing = _REGISTRY.get(cls.KIND)
    if existing is not None and existing is not cls and (
            existing.__qualname__ != cls.__qualname__ or existing.__module__ != cls.__module__):
        raise ValueError(f"handle kind {cls.KIND!r} is already registered by "
                         f"{existing.__module__}.{existing.__qualname__}")
    _REGISTRY[cls.KIND] = cls


def ensure_registered(cls: type[TransactionHandle]) -> None:
    """Register *cls* if this process has not (cloudpickle rebuilds ``__main__`` classes without
    ``__init_subclass__``).
    Raises ValueError: another class already registered the kind."""
    kind = cls.__dict__.get("KIND", "")
    if kind and _REGISTRY.get(kind) is not cls:
        _register(cls)


def registered_handle_kinds() -> dict[str, type[TransactionHandle]]:
    """Return a copy of the kind -> handle class registry."""
    return dict(_REGISTRY)


def encode_handle(handle: TransactionHandle) -> dict[str, Any]:
    """Wrap *handle* in its versioned envelope.
    Raises HandleError: the handle's class was not declared with a ``kind``."""
    cls = type(handle)
    ensure_registered(cls)
    if not cls.KIND or _REGISTRY.get(cls.KIND) is not cls:
        raise HandleError(f"{cls.__qualname__} has no registered kind: declare it with "
                          f"`class {cls.__name__}(TransactionHandle, kind=..., version=...)`")
    return {"kind": cls.KIND, "version": cls.VERSION, "payload": handle.to_payload()}


def decode_handle(envelope: Mapping[str, Any]) -> TransactionHandle:
    """Read a handle from its envelope.
    Raises UnknownHandleKindError: no module registers the envelope's kind.
    Raises HandleVersionError: the envelope was written by a newer handle version.
    Raises HandleError: the envelope is malformed."""
    try:
        kind, version, payload = envelope["kind"], envelope["version"], envelope["payload"]
    except (KeyError, TypeError) as exc:
        raise HandleError(f"not a handle envelope (needs kind, version, payload): {envelope!r:.200}") from exc
    if not isinstance(kind, str) or not isinstance(version, int) or not isinstance(payload, Mapping):
        raise HandleError(f"malformed handle envelope: {envelope!r:.200}")
    cls = _REGISTRY.get(kind) or _import_kind(kind)
    return cls.from_payload(payload, version)


def _import_kind(kind: str) -> type[TransactionHandle]:
    """The class of *kind*, imported from its entry point or :data:`BUILT_IN_KINDS`.
    Raises UnknownHandleKindError: nothing names the kind, or its module fails to import."""
    from ._objpath import load_object  # a kind no import registered: a sink's worker has its own registered
    with _LOOKUP_LOCK:
        if (cls := _REGISTRY.get(kind)) is not None:
            return cls
        where = [ep.value for ep in importlib.metadata.entry_points(group=HANDLE_KINDS_GROUP, name=kind)]
        where += [BUILT_IN_KINDS[kind]] if kind in BUILT_IN_KINDS else []
        failures = []
        for path in where:
            try:
                found = load_object(path)
            except Exception as exc:  # noqa: BLE001 - any failure of a sink's import is reported with its kind
                failures.append(f"importing {path} failed: {type(exc).__name__}: {exc}")
                continue
            if isinstance(found, type) and issubclass(found, TransactionHandle):
                ensure_registered(found)
            if (cls := _REGISTRY.get(kind)) is not None:
                return cls
            failures.append(f"{path} does not define a handle of kind {kind!r}")
    known = ", ".join(sorted(_REGISTRY)) or "none"
    why = "; ".join(failures) or (f"no entry point of group {HANDLE_KINDS_GROUP} names it (known kinds: "
                                  f"{known})")
    raise UnknownHandleKindError(
        f"unknown handle kind {kind!r}: {why}. Install the package of the sink that wrote this checkpoint "
        f"(it declares its kinds as entry points of group {HANDLE_KINDS_GROUP}), or import the module "
        f"that defines its handle before reading the checkpoint")


def dumps_handle(handle: TransactionHandle) -> str:
    """Serialize *handle* to a compact JSON envelope string."""
    return json.dumps(encode_handle(handle), separators=(",", ":"), sort_keys=True)


def loads_handle(text: str) -> TransactionHandle:
    """Parse a JSON envelope string written by :func:`dumps_handle`."""
    try:
        envelope = json.loads(text)
    except ValueError as exc:
        raise HandleError(f"handle envelope is not JSON: {text!r:.200}") from exc
    return decode_handle(envelope)
