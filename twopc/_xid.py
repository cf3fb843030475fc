"""The transaction id every twopc sink gives its prepared transactions::

    twopc:{sink_id}:{batch_id}:{partition_id}:{attempt_id}:{nonce}     canonical
    {sink_id}~{batch_id}~{partition_id}~{attempt_id}~{nonce}           path form

Databases see the canonical form; file names use the path form (Hadoop refuses ``:``; Redis
used it before 0.2), and both parse. ``nonce`` is 8 fresh lower-case hex digits, so a retry
never reuses an id. The id holds no credentials and what recovery needs to find a transaction
whose handle never reached the driver (:meth:`Xid.parse` with the sink's id, then by batch)."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from ._errors import ConfigurationError, ProtocolError

__all__ = ["SINK_ID_PATTERN", "Xid", "validate_sink_id"]

PREFIX = "twopc"

#: What a sink id may look like: it is part of every id, key and file name a sink makes.
SINK_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

_CANONICAL = re.compile(r"^twopc:([A-Za-z0-9][A-Za-z0-9_.-]{0,63}):(\d{1,19}):(\d{1,10}):(\d{1,19}):([0-9a-f]{8})$")
_PATH = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]{0,63})~(\d{1,19})~(\d{1,10})~(\d{1,19})~([0-9a-f]{8})$")
#: Characters an id can contain (both forms), for checking a handle before it reaches SQL.
_ID_CHARS = re.compile(r"^[A-Za-z0-9_.:~-]+$")


def validate_sink_id(sink_id: str) -> str:
    """*sink_id* if it can be part of a transaction id.
    Raises ConfigurationError: not 1-64 characters of ``A-Z a-z 0-9 _ . -`` starting alphanumeric."""
    if not isinstance(sink_id, str) or not SINK_ID_PATTERN.match(sink_id):
        raise ConfigurationError(f"sinkId {sink_id!r} is invalid: use 1-64 characters from A-Z a-z 0-9 _ . - starting "
                                 f"with a letter or digit")
    return sink_id


@dataclass(frozen=True, slots=True)
class Xid:
    """One task attempt's transaction id: :meth:`TransactionContext.xid()
    <twopc.TransactionContext.xid>` (fresh nonce) or :meth:`parse`; ``str(xid)`` is canonical."""

    sink_id: str
    batch_id: int
    partition_id: int
    attempt_id: int
    nonce: str

    def __post_init__(self) -> None:
        validate_sink_id(self.sink_id)
        for name in ("batch_id", "partition_id", "attempt_id"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ProtocolError(f"Xid {name} must be a non-negative integer, got {value!r}")
        if not isinstance(self.nonce, str) or not re.fullmatch(r"[0-9a-f]{8}", self.nonce):
            raise ProtocolError(f"Xid nonce must be 8 lower-case hex digits, got {self.nonce!r}")

    @classmethod
    def new(cls, sink_id: str, batch_id: int, partition_id: int, attempt_id: int) -> Xid:
        """A new id with a fresh random nonce.
        Raises ConfigurationError: *sink_id* is not a valid sink id."""
        return cls(sink_id, int(batch_id), int(partition_id), int(attempt_id), secrets.token_hex(4))

    def __str__(self) -> str:
        return f"{PREFIX}:{self.sink_id}:{self.batch_id}:{self.partition_id}:{self.attempt_id}:{self.nonce}"

    @property
    def text(self) -> str:
        """The canonical form."""
        return str(self)

    @property
    def path_name(self) -> str:
        """The path form (no ``:``)."""
        return f"{self.sink_id}~{self.batch_id}~{self.partition_id}~{self.attempt_id}~{self.nonce}"

    @staticmethod
    def prefix(sink_id: str) -> str:
        """The canonical prefix of *sink_id*'s ids, for listing (then check with :meth:`parse`)."""
        return f"{PREFIX}:{validate_sink_id(sink_id)}:"

    @classmethod
    def parse(cls, text: str) -> Xid | None:
        """The id *text* spells in either form; ``None`` when it is not a twopc id."""
        if not isinstance(text, str) or (m := _CANONICAL.match(text) or _PATH.match(text)) is None:
            return None
        try:
            return cls(m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5))
        except (ConfigurationError, ProtocolError):
            return None

    @classmethod
    def checked(cls, text: object, *, max_bytes: int | None = None, what: str = "twopc transaction id") -> str:
        """*text* if a well-formed id (either form) within *max_bytes*: a handle read back is checked
        before it reaches a database.
        Raises ProtocolError: it is not a twopc id, or too long for the target."""
        # the two forms' patterns check all that parse() builds an Xid to check, without building it
        if (not isinstance(text, str) or not _ID_CHARS.match(text)
                or not (_CANONICAL.match(text) or _PATH.match(text))
                or (max_bytes is not None and len(text.encode()) > max_bytes)):
            raise ProtocolError(f"handle txn_id {text!r:.80} is not a {what}")
        return text

    def fitting(self, max_bytes: int | None, target: str) -> str:
        """The canonical form, checked against *target*'s *max_bytes* (``None``: no limit).
        Raises ConfigurationError: too long; the message says how long the sink id may be."""
        text = str(self)
        size = len(text.encode())
        if max_bytes is not None and size > max_bytes:
            room = max_bytes - (size - len(self.sink_id.encode()))
            raise ConfigurationError(f"transaction id {text!r} is {size} bytes, over the {max_bytes}-byte limit of "
                                     f"{target} transaction ids: use a sink id of at most {max(room, 1)} characters "
                                     f"(option sinkId; {len(self.sink_id)} characters now)")
        return text
