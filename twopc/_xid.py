"""The transaction id every twopc sink gives its prepared transactions.

One value type owns the format, so every sink (PostgreSQL GIDs, MySQL/MariaDB XA gtrids,
staging rows, Redis keys, file names) builds and parses ids the same way::

    twopc:{sink_id}:{batch_id}:{partition_id}:{attempt_id}:{nonce}     canonical
    {sink_id}~{batch_id}~{partition_id}~{attempt_id}~{nonce}           path form

The canonical form is what a sink shows a database. The path form has no ``:`` (Hadoop
refuses ``:`` in a file name) and is what the file sink names its files with; the Redis
sink wrote it before version 0.2, so both forms parse. ``nonce`` is 8 lower-case hex
digits, fresh per transaction, so a retried attempt never reuses an id.

The id carries no credentials and everything recovery needs to find a transaction whose
handle never reached the driver: list the target's prepared ids, keep those that
:meth:`Xid.parse` accepts with the sink's id, and classify them by batch.
"""

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
    """Return *sink_id* if it can be part of a transaction id.

    Raises:
        ConfigurationError: it has characters outside ``A-Z a-z 0-9 _ . -``, does not start
            with a letter or digit, or is longer than 64 characters.
    """
    if not isinstance(sink_id, str) or not SINK_ID_PATTERN.match(sink_id):
        raise ConfigurationError(
            f"sinkId {sink_id!r} is invalid: use 1-64 characters from A-Z a-z 0-9 _ . - "
            f"starting with a letter or digit"
        )
    return sink_id


@dataclass(frozen=True, slots=True)
class Xid:
    """The id of one task attempt's transaction (see the module docstring).

    Build one with :meth:`TransactionContext.xid() <twopc.TransactionContext.xid>` (a fresh
    nonce) or :meth:`parse`; ``str(xid)`` is the canonical form.
    """

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

        Raises:
            ConfigurationError: *sink_id* is not a valid sink id.
        """
        return cls(sink_id, int(batch_id), int(partition_id), int(attempt_id), secrets.token_hex(4))

    def __str__(self) -> str:
        return f"{PREFIX}:{self.sink_id}:{self.batch_id}:{self.partition_id}:{self.attempt_id}:{self.nonce}"

    @property
    def text(self) -> str:
        """The canonical form, ``twopc:{sink}:{batch}:{partition}:{attempt}:{nonce}``."""
        return str(self)

    @property
    def path_name(self) -> str:
        """The path form, ``{sink}~{batch}~{partition}~{attempt}~{nonce}`` (no ``:``)."""
        return f"{self.sink_id}~{self.batch_id}~{self.partition_id}~{self.attempt_id}~{self.nonce}"

    @staticmethod
    def prefix(sink_id: str) -> str:
        """The canonical prefix every id of *sink_id* starts with (for listing by prefix;
        match the result with :meth:`parse`, a prefix alone is not a check)."""
        return f"{PREFIX}:{validate_sink_id(sink_id)}:"

    @classmethod
    def parse(cls, text: str) -> Xid | None:
        """The id *text* spells, in either form; ``None`` when it is not a twopc id."""
        if not isinstance(text, str):
            return None
        m = _CANONICAL.match(text) or _PATH.match(text)
        if m is None:
            return None
        try:
            return cls(m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), m.group(5))
        except (ConfigurationError, ProtocolError):
            return None

    @classmethod
    def checked(cls, text: object, *, max_bytes: int | None = None, what: str = "twopc transaction id") -> str:
        """Return *text* when it is a well-formed id (either form) within *max_bytes*, for
        use in a statement; a handle read back from a ledger is checked before it reaches
        a database.

        Raises:
            ProtocolError: it is not a twopc id, or it is too long for the target.
        """
        # the two forms' patterns check all that parse() builds an Xid to check, without building it
        if (not isinstance(text, str) or not _ID_CHARS.match(text)
                or not (_CANONICAL.match(text) or _PATH.match(text))
                or (max_bytes is not None and len(text.encode()) > max_bytes)):
            raise ProtocolError(f"handle txn_id {text!r:.80} is not a {what}")
        return text

    def fitting(self, max_bytes: int | None, target: str) -> str:
        """The canonical form, checked against *max_bytes*, the longest id *target* (its name,
        for the message) accepts (``None``: no limit).

        Raises:
            ConfigurationError: the id is longer than the target allows; the message says
                how long the sink id may be.
        """
        text = str(self)
        size = len(text.encode())
        if max_bytes is not None and size > max_bytes:
            room = max_bytes - (size - len(self.sink_id.encode()))
            raise ConfigurationError(
                f"transaction id {text!r} is {size} bytes, over the {max_bytes}-byte limit of {target} "
                f"transaction ids: use a sink id of at most {max(room, 1)} characters (option sinkId; "
                f"{len(self.sink_id)} characters now)"
            )
        return text
