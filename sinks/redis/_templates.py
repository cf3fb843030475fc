"""Templates of the Redis mapping, and how a cell becomes a Redis string."""

from __future__ import annotations

import datetime
import json
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twopc import ConfigurationError

from ._keys import key_slot

__all__ = ["Number", "Template", "as_text", "encode", "encode_column", "escape", "null_error"]

_FORMATTER = string.Formatter()


@dataclass(frozen=True)
class Template:
    """A compiled template: literal pieces and column names alternating."""

    text: str
    parts: tuple[tuple[str, str | None], ...]

    @classmethod
    def compile(cls, text: str, what: str) -> Template:
        """Compile *text* (named *what* in messages); ConfigurationError unless it is a valid template."""
        if not isinstance(text, str):
            raise ConfigurationError(f"{what} must be a string template, got {text!r}")
        parts: list[tuple[str, str | None]] = []
        acc = ""
        try:
            parsed = list(_FORMATTER.parse(text))
        except ValueError as exc:
            raise ConfigurationError(
                f"{what} {text!r} is not a valid template ({exc}): columns are {{column}}, "
                f"literal braces {{{{ and }}}} (a Redis hash tag is written {{{{tag}}}})") from None
        for literal, name, spec, conv in parsed:
            if name is not None and (not name or spec or conv or any(ch in name for ch in ".[]")):
                raise ConfigurationError(
                    f"{what} {text!r}: {{{name}}} is not a plain column reference (write "
                    f"{{column}}; a literal brace is {{{{ or }}}})")
            acc += literal
            if name is not None:
                parts.append((acc, name))
                acc = ""
        if acc or not parts:
            parts.append((acc, None))
        return cls(text, tuple(parts))

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(n for _, n in self.parts if n is not None)

    @property
    def exact(self) -> str | None:
        """The column when the template is exactly ``{column}``."""
        return self.parts[0][1] if len(self.parts) == 1 and self.parts[0][0] == "" else None

    @property
    def constant(self) -> str | None:
        """The text when the template references no column."""
        return None if self.columns else "".join(lit for lit, _ in self.parts)

    def fixed_slot(self) -> int | None:
        """The slot of every rendering, when the hash tag is complete before the first column."""
        const = self.constant
        if const is not None:
            return key_slot(const)
        tag = re.search(r"\{([^}]*)\}", self.parts[0][0])  # Redis's rule: the first {, the first } after it
        return key_slot(tag.group(0)) if tag and tag.group(1) else None

    def render(self, cols: Mapping[str, list[Any]], n: int, what: str) -> list[Any]:
        """Render for rows 0..n-1 (bytes kept by an exact template); ConfigurationError for a null
        cell, or non-UTF-8 bytes inside a longer template."""
        const = self.constant
        if const is not None:
            return [const] * n
        exact = self.exact
        if exact is not None:
            return encode_column(cols[exact], exact, what)
        pieces: list[list[str] | str] = []
        for literal, name in self.parts:
            if literal:
                pieces.append(literal)
            if name is not None:
                values = cols[name]
                kinds = set(map(type, values))
                pieces.append(values if kinds <= {str} else  # most text cells: no per-cell call
                              encode_column(values, name, what) if kinds <= {int, float} else
                              [_encode_text(v, name, what) for v in values])
        return ["".join(p if isinstance(p, str) else p[i] for p in pieces) for i in range(n)]


@dataclass(frozen=True)
class Number:
    """A numeric op parameter: a constant or one column."""

    constant: int | float | None
    column: str | None

    @classmethod
    def parse(cls, value: Any, what: str, *, integer: bool) -> Number:
        """Read a JSON number or ``"{column}"``; ConfigurationError for anything else."""
        if isinstance(value, bool):
            raise ConfigurationError(f"{what} must be a number or \"{{column}}\", got {value!r}")
        if isinstance(value, int) or (isinstance(value, float) and not integer):
            return cls(value, None)
        if isinstance(value, str):
            t = Template.compile(value, what)
            if t.exact is not None:
                return cls(None, t.exact)
        kind = "an integer" if integer else "a number"
        raise ConfigurationError(f"{what} must be {kind} or \"{{column}}\" (exactly one column), got {value!r}")

    def values(self, cols: Mapping[str, list[Any]], n: int) -> list[Any]:
        """The parameter for rows 0..n-1 (cells unchecked)."""
        return [self.constant] * n if self.column is None else cols[self.column]


def null_error(column: str, what: str) -> ConfigurationError:
    """The error for a null cell in *column*, which *what* needs."""
    return ConfigurationError(f"column {column!r} is null in a row, but {what} needs a value: "
                              f"filter or fill nulls before writing (e.g. df.na.fill)")


def encode(v: Any, column: str, what: str) -> str | bytes:
    """A cell as a Redis string (rules in :mod:`twopc.sinks.redis`); ConfigurationError when null."""
    if isinstance(v, str | bytes):
        return v
    if v is None:
        raise null_error(column, what)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):  # before the rarer types: ids and counts are the common cells
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, datetime.date | datetime.time):
        return v.isoformat()
    if isinstance(v, list | dict | tuple):
        return json.dumps(v, default=str, separators=(",", ":"))
    return str(v)  # Decimal, anything else


def encode_column(values: list[Any], column: str, what: str) -> list[Any]:
    """``[encode(v, column, what) for v in values]``, without a call per cell for a plain column."""
    kinds = set(map(type, values))
    if kinds <= {str, bytes}:
        return list(values)
    if kinds == {int}:  # bool is its own type: it never takes this path
        return list(map(str, values))
    if kinds == {float}:
        return list(map(repr, values))
    return [encode(v, column, what) for v in values]


def _encode_text(v: Any, column: str, what: str) -> str:
    e = encode(v, column, what)
    if isinstance(e, bytes):
        try:
            return e.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigurationError(f"column {column!r} holds bytes that are not UTF-8 and cannot be "
                                     f"part of {what}") from None
    return e


def escape(literal: str) -> str:
    """*literal* as template text (braces doubled)."""
    return literal.replace("{", "{{").replace("}", "}}")


def as_text(v: Any) -> str:
    """A reply element or key as ``str`` (undecodable bytes as surrogate escapes)."""
    return v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v)
