"""Column lists in options: ``upsertKeys`` (``a, "B c", `d```) and Spark's
``createTableColumnTypes`` (``"name VARCHAR(64), price DECIMAL(10,2)"``)."""

from __future__ import annotations

import re

from twopc import ConfigurationError

from .._names import read_quoted

__all__ = ["parse_column_list", "parse_column_types"]

_UNQUOTED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPE_OUTSIDE_QUOTES = re.compile(r"[A-Za-z0-9_ \t\r\n(),.\[\]]")


def _read_name(text: str, i: int, what: str) -> tuple[str, int]:
    """The column name at *i* (plain, or quoted in backticks or double quotes, doubled to escape) and the next index."""
    if i < len(text) and text[i] in "`\"":
        return read_quoted(text, i, f"{what}: column name")
    m = _UNQUOTED_NAME.match(text, i)
    if not m:
        snippet = text[i:i + 20]
        raise ConfigurationError(
            f"{what}: expected a column name at {snippet!r}; quote names with spaces or special "
            f"characters in backticks, e.g. `my col`")
    return m.group(0), m.end()


def _skip_ws(text: str, i: int) -> int:
    return len(text) - len(text[i:].lstrip())


def parse_column_list(text: str, what: str = "upsertKeys") -> list[str]:
    """Parse ``a, "B c", `d``` into column names. Raises ``ConfigurationError``: syntax error or duplicate name
    (compared case-insensitively)."""
    names: list[str] = []
    i = _skip_ws(text, 0)
    if i >= len(text):
        return names
    while True:
        name, i = _read_name(text, i, what)
        if name.lower() in (n.lower() for n in names):
            raise ConfigurationError(f"{what}: column {name!r} is listed twice")
        names.append(name)
        i = _skip_ws(text, i)
        if i >= len(text):
            return names
        if text[i] != ",":
            raise ConfigurationError(f"{what}: expected ',' after column {name!r}, got {text[i:i + 20]!r}")
        i = _skip_ws(text, i + 1)
        if i >= len(text):
            raise ConfigurationError(f"{what}: trailing comma (empty column name)")


def parse_column_types(text: str, what: str = "createTableColumnTypes") -> dict[str, str]:
    """Parse Spark's ``createTableColumnTypes`` (``"name VARCHAR(64), price DECIMAL(10,2)"``). Each type is
    kept verbatim, so it may hold only letters, digits, ``_``, spaces, ``.``, ``[]``, balanced parentheses
    and balanced single-quoted literals (``ENUM('a','b')``). Raises ``ConfigurationError``: syntax error,
    duplicate column, or a type that could inject SQL."""
    result: dict[str, str] = {}
    n = len(text)
    i = _skip_ws(text, 0)
    if i >= n:
        return result
    while True:
        if i >= n:
            raise ConfigurationError(f"{what}: trailing comma (empty entry)")
        quoted = text[i] in "`\""
        name, i = _read_name(text, i, what)
        if i < n and not text[i].isspace() and not quoted and text[i] != ",":
            raise ConfigurationError(
                f"{what}: column name {name + text[i:i + 10]!r}... has characters that need quoting; "
                f"quote it in backticks")
        start = i
        depth, in_quote = 0, False
        while i < n:
            c = text[i]
            if in_quote:
                if c == "'":
                    if i + 1 < n and text[i + 1] == "'":
                        i += 1
                    else:
                        in_quote = False
            elif c == "'":
                in_quote = True
            elif c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth < 0:
                    raise ConfigurationError(f"{what}: column {name!r}: unbalanced parentheses in its type")
            elif c == "," and depth == 0:
                break
            i += 1
        type_text = text[start:i].strip()
        _check_type(name, type_text, depth, in_quote, what)
        if name.lower() in {k.lower() for k in result}:
            raise ConfigurationError(f"{what}: column {name!r} is listed twice")
        result[name] = type_text
        if i >= n:
            return result
        i = _skip_ws(text, i + 1)


def _check_type(name: str, type_text: str, depth: int, in_quote: bool, what: str) -> None:
    where = f"{what}: column {name!r}"
    if not type_text:
        raise ConfigurationError(f"{where} has no type (write `name TYPE`, e.g. `{name} VARCHAR(64)`)")
    for bad, label in ((";", "';'"), ("--", "'--' (SQL comment)"), ("/*", "'/*' (SQL comment)"),
                       ("*/", "'*/' (SQL comment)")):
        if bad in type_text:
            raise ConfigurationError(f"{where}: type {type_text!r} contains {label}, which is not allowed")
    if in_quote:
        raise ConfigurationError(f"{where}: type {type_text!r} has an unterminated ' quote")
    if depth != 0:
        raise ConfigurationError(f"{where}: type {type_text!r} has unbalanced parentheses")
    if not type_text[0].isascii() or not type_text[0].isalpha():
        raise ConfigurationError(f"{where}: type {type_text!r} must start with a letter")
    quote = False
    for c in type_text:
        if c == "'":
            quote = not quote  # a doubled '' toggles twice
            continue
        if quote:
            if c == "\\" or (not c.isprintable() and c != " "):
                raise ConfigurationError(f"{where}: type {type_text!r}: character {c!r} is not allowed "
                                         f"in a quoted literal")
        elif not _TYPE_OUTSIDE_QUOTES.match(c):
            raise ConfigurationError(f"{where}: type {type_text!r}: character {c!r} is not allowed in a "
                                     f"column type")


