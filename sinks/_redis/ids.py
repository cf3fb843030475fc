"""Redis Stream entry ids (``<ms>-<seq>``, unsigned 64-bit each; ``0-0`` means "before every
entry") and ranges of them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from twopc import ConfigurationError

__all__ = ["MAX_U64", "ZERO", "EntryId", "Range"]

MAX_U64 = 2**64 - 1
_ID = re.compile(r"^(\d{1,20})(?:-(\d{1,20}))?$")


@dataclass(frozen=True, order=True)
class EntryId:
    """A stream entry id; ordered like Redis orders them."""

    ms: int
    seq: int = 0

    @classmethod
    def parse(cls, text: str | bytes, what: str = "entry id") -> EntryId:
        """Read ``<ms>-<seq>`` (or ``<ms>``); ConfigurationError naming *what* otherwise."""
        raw = text.decode() if isinstance(text, bytes) else str(text)
        m = _ID.match(raw.strip())
        if m is None or int(m.group(1)) > MAX_U64 or int(m.group(2) or 0) > MAX_U64:
            raise ConfigurationError(f"{what} must be a Redis Stream entry id <ms>-<seq> such as "
                                     f"1700000000000-0, got {raw!r:.60}")
        return cls(int(m.group(1)), int(m.group(2) or 0))

    def next(self) -> EntryId:
        """The smallest id greater than this one (``XTRIM MINID`` of "everything up to me")."""
        if self.seq < MAX_U64:
            return EntryId(self.ms, self.seq + 1)
        if self.ms >= MAX_U64:
            raise ValueError("no entry id follows 18446744073709551615-18446744073709551615")
        return EntryId(self.ms + 1, 0)

    def previous(self) -> EntryId:
        """The greatest id smaller than this one (an exclusive start that includes this id)."""
        if self.seq > 0:
            return EntryId(self.ms, self.seq - 1)
        if self.ms == 0:
            return ZERO
        return EntryId(self.ms - 1, MAX_U64)

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"


ZERO = EntryId(0, 0)


@dataclass(frozen=True)
class Range:
    """The entries of one stream with ``lo < id <= hi``: *count* of them when planned."""

    stream: str
    lo: EntryId
    hi: EntryId
    count: int

    @property
    def empty(self) -> bool:
        return self.count <= 0 or self.hi <= self.lo
