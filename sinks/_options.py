"""One way every sink reads its Spark options (:class:`OptionReader`: case-insensitive, typed,
an unclaimed option refused with the known one closest to it), and one duration type
(:class:`Duration`). Error messages never show a value that may be a secret."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from twopc import ConfigurationError
from twopc.spi import MissingOptionError
from twopc.spi.runtime import RUNTIME_KEYS, RUNTIME_OPTION_NAMES

__all__ = ["MISSPELLED", "SPARK_PASSED_OPTIONS", "Duration", "OptionReader", "closest_option", "misspelling",
           "unknown_option_hint"]

#: Options Spark hands every writer without the user typing them, as spelled in Spark's API.
SPARK_PASSED_NAMES: tuple[str, ...] = ("path", "queryName")
#: :data:`SPARK_PASSED_NAMES` lower-cased.
SPARK_PASSED_OPTIONS: frozenset[str] = frozenset(n.lower() for n in SPARK_PASSED_NAMES)

_ALWAYS_ACCEPTED = frozenset(RUNTIME_KEYS) | SPARK_PASSED_OPTIONS
#: the difflib ratio at which an unknown option counts as a known one misspelled (:func:`misspelling`)
MISSPELLED = 0.75
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|sec|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "sec": 1000.0, "min": 60_000.0, "h": 3_600_000.0, "d": 86_400_000.0}
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")

S = TypeVar("S", bound=str)


def closest_option(name: str, known: Iterable[str], *, cutoff: float = 0.6) -> str | None:
    """The option of *known* (or the runtime's) nearest to *name*, case-insensitively, as *known*
    spells it; ``None`` below difflib ratio *cutoff*."""
    return _nearest(name, (*known, *RUNTIME_OPTION_NAMES), cutoff)


def unknown_option_hint(name: str, known: Iterable[str]) -> str:
    """``did you mean 'lockTimeout'?`` for an unknown option *name*, else ``remove it``."""
    near = closest_option(name, known)
    return f"did you mean {near!r}?" if near else "remove it"


def misspelling(wanted: str, given: Iterable[str]) -> str | None:
    """The option of *given* most likely *wanted* misspelled (difflib ratio at least 0.75), as given;
    options Spark or the runtime pass are never taken for one."""
    return _nearest(wanted, (k for k in given if k.lower() not in _ALWAYS_ACCEPTED), MISSPELLED)


def _nearest(name: str, candidates: Iterable[str], cutoff: float) -> str | None:
    """The candidate other than *name* nearest to it, compared case-insensitively, as spelled."""
    by_low: dict[str, str] = {}
    for k in candidates:
        by_low.setdefault(k.lower(), k)
    by_low.pop(name.lower(), None)
    match = difflib.get_close_matches(name.lower(), list(by_low), n=1, cutoff=cutoff)
    return by_low[match[0]] if match else None


@dataclass(frozen=True, order=True)
class Duration:
    """A non-negative length of time in whole milliseconds (rounded up: a limit never becomes 0 = none)."""

    ms: int

    @classmethod
    def parse(cls, value: str | float | Duration, name: str) -> Duration:
        """Read ``30s``, ``500ms``, ``2min``, ``1h``, ``1d``, ``250us`` or a number of seconds. Raises
        ``ConfigurationError``: the text is not a duration; the message names *name*."""
        if isinstance(value, Duration):
            return value
        if isinstance(value, bool):
            raise ConfigurationError(f"{name} must be a duration such as 30s, 500ms or 2min, got {value!r}")
        if isinstance(value, int | float):
            if not math.isfinite(value) or value < 0:
                raise ConfigurationError(f"{name} must be a duration >= 0, got {value!r}")
            return cls(math.ceil(value * 1000))
        m = _DURATION.match(value) if isinstance(value, str) else None
        if m is None:
            raise ConfigurationError(
                f"{name} must be a duration such as 30s, 500ms, 2min, 1h or a number of seconds, got {value!r}")
        return cls(math.ceil(float(m.group(1)) * _UNIT_MS[(m.group(2) or "s").lower()]))

    @property
    def seconds(self) -> float:
        """The duration in seconds."""
        return self.ms / 1000

    @property
    def whole_seconds(self) -> int:
        """Whole seconds, rounded up (for settings counted in seconds; 0 stays 0)."""
        return -(-self.ms // 1000)

    def __str__(self) -> str:
        if self.ms % 1000:
            return f"{self.ms}ms"
        s = self.ms // 1000
        if s and s % 3600 == 0:
            return f"{s // 3600}h"
        if s and s % 60 == 0:
            return f"{s // 60}min"
        return f"{s}s"


class OptionReader:
    """The options of one write, read by one format; :meth:`refuse_unknown` refuses any option no lookup claimed but
    the runtime's and Spark's own. Raises ``ConfigurationError``: two spellings of one key carry different values.

    Args:
        options: Spark's writer options (any key spelling).
        format_name: the format, for messages (``twopc-redis``).
    """

    def __init__(self, options: Mapping[str, str], format_name: str) -> None:
        self.format_name = format_name
        self._values: dict[str, str] = {}
        self._spelled: dict[str, str] = {}
        for key, value in options.items():
            low = key.lower()
            if low in self._values and self._values[low] != value:
                raise ConfigurationError(
                    f"option {key} is given twice (keys are case-insensitive) with different values")
            self._values[low] = value
            self._spelled.setdefault(low, key)
        self._names: dict[str, None] = {}  # every name looked up, in order

    def get(self, name: str) -> str | None:
        """The raw value of option *name*, or ``None``; marks it as known."""
        self._names.setdefault(name)
        return self._values.get(name.lower())

    def text(self, name: str, default: str | None = None) -> str | None:
        """The value stripped; blank counts as absent."""
        raw = self.get(name)
        return default if raw is None or not raw.strip() else raw.strip()

    def required(self, name: str, example: str) -> str:
        """The value, or :meth:`missing`'s error."""
        value = self.text(name)
        if value is None:
            raise self.missing(name, example)
        return value

    def missing(self, name: str, example: str, *, aliases: Iterable[str] = ()) -> MissingOptionError:
        """The error for required option *name* (or an *alias*) not given, showing *example*, first
        naming a given option that misspells it (``unknown option 'dbtabel': did you mean 'dbtable'?``)."""
        unknown = list(self.unclaimed())
        for wanted in (name, *aliases):
            typo = misspelling(wanted, unknown)
            if typo is not None:
                return MissingOptionError(f"unknown option {typo!r}: did you mean {wanted!r}? {self.format_name} "
                                          f'needs option "{name}", e.g. {example}')
        return MissingOptionError(f'{self.format_name} needs option "{name}", e.g. {example}')

    def integer(self, name: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int:
        """A whole number within [*minimum*, *maximum*]."""
        raw = self.text(name)
        if raw is None:
            return default
        if not re.fullmatch(r"[+-]?\d+", raw):
            raise ConfigurationError(f"{name} must be a whole number >= {minimum}, got {raw!r}")
        value = int(raw)
        if value < minimum or (maximum is not None and value > maximum):
            bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
            raise ConfigurationError(f"{name} must be a whole number {bound}, got {value}")
        return value

    def boolean(self, name: str, default: bool, *, strict: bool = False) -> bool:
        """``true``/``false`` (with *strict* off also ``1/0``, ``yes/no``, ``on/off``)."""
        raw = self.text(name)
        if raw is None:
            return default
        low = raw.lower()
        if low in (("true",) if strict else _TRUE):
            return True
        if low in (("false",) if strict else _FALSE):
            return False
        raise ConfigurationError(f"{name} must be true or false, got {raw!r}")

    def choice(self, name: str, allowed: Iterable[S], default: S) -> S:
        """One of *allowed* (compared case-insensitively)."""
        raw = self.text(name)
        if raw is None:
            return default
        options = tuple(allowed)
        if (match := next((a for a in options if raw.lower() == a.lower()), None)) is not None:
            return match
        listed = ", ".join(options[:-1]) + f" or {options[-1]}" if len(options) > 1 else options[0]
        raise ConfigurationError(f"{name} must be {listed}, got {raw!r}")

    def duration(self, name: str, default: Duration | str | float) -> Duration:
        """A :class:`Duration` (``30s``, ``500ms``, plain seconds)."""
        raw = self.text(name)
        return Duration.parse(default if raw is None else raw, name)

    def unclaimed(self) -> dict[str, str]:
        """Options nobody has looked up (spelled as given), but the runtime's and Spark's own."""
        claimed = {n.lower() for n in self._names}
        return {self._spelled[k]: v for k, v in self._values.items() if k not in claimed | _ALWAYS_ACCEPTED}

    def refuse_unknown(self, *, hint: str = "") -> None:
        """Raise when an option was given that no lookup claimed. Raises ``ConfigurationError``: naming each with
        its closest known option, listing the supported ones."""
        unknown = sorted(self.unclaimed(), key=str.lower)
        if unknown:
            each = "; ".join(f"{name}: {unknown_option_hint(name, self._names)}" for name in unknown)
            raise ConfigurationError(
                f"{self.format_name} does not know option(s) {', '.join(unknown)} ({each}). Supported: "
                f"{', '.join(self._names)}" + (f". {hint}" if hint else ""))
