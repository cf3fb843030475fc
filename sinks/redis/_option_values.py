"""``twopc-redis`` option values that are more than a string: a choice, the ``requireSameSlot``
tri-state, a positive timeout."""

from __future__ import annotations

from twopc import ConfigurationError

from .._options import Duration, OptionReader

__all__ = ["FORMAT_NAME", "one_of", "same_slot", "timeout_seconds"]

#: The Spark format name of the Redis sink.
FORMAT_NAME = "twopc-redis"


def one_of(name: str, value: str, allowed: tuple[str, ...]) -> str:
    """*value* (case-insensitive) when it is one of *allowed*, else ConfigurationError naming option *name*."""
    v = value.strip().lower()
    if v not in allowed:
        raise ConfigurationError(f"{name} must be {', '.join(allowed[:-1])} or {allowed[-1]}, got {value!r}")
    return v


def same_slot(value: bool | str) -> bool | None:
    """``requireSameSlot``: None for auto, else a boolean (the words OptionReader takes)."""
    if not isinstance(value, str):
        return bool(value)
    if value.strip().lower() == "auto":
        return None
    try:
        return OptionReader({"requireSameSlot": value}, FORMAT_NAME).boolean("requireSameSlot", False)
    except ConfigurationError:
        raise ConfigurationError(f"requireSameSlot must be auto, true or false, got {value!r}") from None


def timeout_seconds(name: str, value: float | Duration) -> float:
    """A timeout in seconds, > 0."""
    d = Duration.parse(value, name)
    if d.ms <= 0:
        raise ConfigurationError(f"{name} must be > 0, got {value!r}")
    return d.seconds
