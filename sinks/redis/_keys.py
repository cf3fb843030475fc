"""The Redis sink's key names, hash tags and cluster slots.

A sink id's keys share one hash tag ``T`` (``P`` = ``T:<sink_id>``), so one commit touches one
slot: ``P:txns``, ``P:prepared``, ``P:committed``, ``P:staging:<txn id as registered>`` and
``P:owner`` (the checkpoint that writes the sink id).
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.crc import key_slot as _crc_key_slot

from twopc import ConfigurationError
from twopc.spi import validate_sink_id

__all__ = ["RedisKeys", "default_hash_tag", "key_slot", "normalize_tag", "slot_message"]


def key_slot(key: str | bytes) -> int:
    """The Redis Cluster slot (0..16383) of *key*: CRC16 of its hash tag, or of the whole key."""
    return int(_crc_key_slot(key.encode("utf-8") if isinstance(key, str) else key))


def normalize_tag(tag: str) -> str:
    """``shop`` or ``{shop}`` as ``{shop}``; ConfigurationError when empty or with braces inside."""
    t = tag.strip()
    inner = t[1:-1] if t.startswith("{") and t.endswith("}") else t
    if not inner or "{" in inner or "}" in inner:
        raise ConfigurationError(f"hashTag {tag!r} is invalid: give a non-empty tag without braces inside, "
                                 f"like shop or {{shop}}")
    return "{" + inner + "}"


def default_hash_tag(sink_id: str) -> str:
    """The hash tag of a sink without option ``hashTag``: ``{twopc:<sink id>}``."""
    return f"{{twopc:{validate_sink_id(sink_id)}}}"


@dataclass(frozen=True)
class RedisKeys:
    """The keys of one sink id under one hash tag (all in the tag's slot)."""

    txns: str
    prepared: str
    committed: str
    staging_prefix: str
    owner: str

    @classmethod
    def of(cls, sink_id: str, tag: str) -> RedisKeys:
        """The keys of *sink_id* under hash tag *tag* (``{...}``); ConfigurationError for an invalid sink id."""
        p = f"{tag}:{validate_sink_id(sink_id)}:"
        return cls(p + "txns", p + "prepared", p + "committed", p + "staging:", p + "owner")

    def staging(self, txn_id: str) -> str:
        return self.staging_prefix + txn_id


def slot_message(subject: str, got: int, tag: str, op: str, *, tag_option_set: bool) -> str:
    """Why *subject* (a key or key template in slot *got*) is outside hash tag *tag*'s slot."""
    lit = tag.replace("{", "{{").replace("}", "}}")
    return (f"{op + ': ' if op else ''}{subject} hashes to cluster slot {got}, but the sink's "
            f"keys use hash tag {tag} (slot {key_slot(tag)}): one commit must touch one slot. Put the hash tag "
            f"into the key template, e.g. \"{lit}:...\" (a literal brace is written {{{{ in a template)"
            + ("" if tag_option_set else ", and set option hashTag so it does not depend on the sink id"))
