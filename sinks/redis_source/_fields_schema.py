"""Option ``fieldsSchema`` checked before Spark parses it (Spark's ParseException would quote the
whole schema DDL instead of naming the option). Grammar, a subset of Spark's column DDL::

    columns  := column ("," column)*
    column   := name type ["NOT" "NULL"] ["COMMENT" 'text' | "text"]
    name     := identifier | `quoted identifier`
    type     := BOOLEAN | TINYINT | BYTE | SMALLINT | SHORT | INT | INTEGER | BIGINT | LONG
              | FLOAT | REAL | DOUBLE | DECIMAL|DEC|NUMERIC [(p[, s])] | STRING | BINARY
              | DATE | TIMESTAMP | TIMESTAMP_LTZ | TIMESTAMP_NTZ
"""

from __future__ import annotations

import re

from twopc import ConfigurationError

__all__ = ["FIELD_TYPES", "check_fields_schema"]

#: the type names a stream field's text is parsed into (Spark's spellings, upper case)
FIELD_TYPES = ("BOOLEAN", "TINYINT", "BYTE", "SMALLINT", "SHORT", "INT", "INTEGER", "BIGINT", "LONG", "FLOAT",
               "REAL", "DOUBLE", "DECIMAL", "DEC", "NUMERIC", "STRING", "BINARY", "DATE", "TIMESTAMP",
               "TIMESTAMP_LTZ", "TIMESTAMP_NTZ")
#: how the message lists them
_LISTED = ("STRING, BIGINT, INT, SMALLINT, TINYINT, DOUBLE, FLOAT, BOOLEAN, DECIMAL(p,s), DATE, TIMESTAMP, "
           "TIMESTAMP_NTZ, BINARY")
_DECIMALS = ("DECIMAL", "DEC", "NUMERIC")
#: the columns every row has before the typed ones
_FIXED = ("stream", "id", "timestamp", "fields")
_EXAMPLE = '.option("fieldsSchema", "amount BIGINT, price DECIMAL(10,2), user STRING")'
_TOKEN = re.compile(r"""\s*(?:(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<quoted>`(?:[^`]|``)*`)"""
                    r"""|(?P<text>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
                    r"""|(?P<number>\d+)|(?P<punct>[(),<>:])|(?P<other>\S))""")


class _Tokens:
    def __init__(self, text: str) -> None:
        self.items = [(m.lastgroup, m.group(m.lastgroup), m.start(m.lastgroup)) for m in _TOKEN.finditer(text)
                      if m.lastgroup]  # every alternative of _TOKEN is a named group
        self.pos = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.items[self.pos] if self.pos < len(self.items) else None

    def take(self) -> tuple[str, str, int] | None:
        tok = self.peek()
        self.pos += tok is not None
        return tok

    def accept(self, kind: str, *values: str) -> bool:
        """Take the next token if it is a *kind* (``word``, ``punct``) of *values* (any case)."""
        tok = self.peek()
        taken = tok is not None and tok[0] == kind and tok[1].upper() in values
        self.pos += taken
        return taken


def check_fields_schema(text: str) -> None:
    """ConfigurationError (naming the option, *text*, the problem and an example) unless *text* parses."""
    if not text.strip():
        return
    reason = _problem(text)
    if reason is not None:
        raise ConfigurationError(
            f"option fieldsSchema {text!r:.300} does not parse: {reason}. Give the typed columns as "
            f"comma-separated 'name TYPE' pairs, TYPE one of {_LISTED}, e.g. {_EXAMPLE}; nothing was read")


def _problem(text: str) -> str | None:
    toks = _Tokens(text)
    seen = {c: "a column every row of the source has: read that field from the map column fields" for c in _FIXED}
    while True:
        tok = toks.take()
        if tok is None:
            return "a column name is missing at the end (a trailing comma?)"
        kind, value, at = tok
        if kind not in ("word", "quoted"):
            return f"expected a column name at position {at}, found {value!r}"
        name = value[1:-1].replace("``", "`") if kind == "quoted" else value
        if not name:
            return f"the quoted column name at position {at} is empty"
        if name.lower() in seen:
            return f"column {name!r} is given twice (it is {seen[name.lower()]})"
        seen[name.lower()] = "an earlier column of fieldsSchema: give it once"
        problem = _type(toks, name)
        if problem is not None:
            return problem
        if toks.accept("word", "NOT") and not toks.accept("word", "NULL"):
            return f"column {name!r}: NOT must be followed by NULL"
        if toks.accept("word", "COMMENT"):
            comment = toks.take()
            if comment is None or comment[0] != "text":
                return f"column {name!r}: COMMENT must be followed by a quoted 'text'"
        end = toks.take()
        if end is None:
            return None
        if end[0] != "punct" or end[1] != ",":
            return (f"after column {name!r} expected ',' or the end at position {end[2]}, found {end[1]!r} "
                    f"(one type per column)")


def _type(toks: _Tokens, name: str) -> str | None:
    tok = toks.take()
    if tok is None or (tok[0] == "punct" and tok[1] == ","):
        return f"column {name!r} has no type"
    kind, value, at = tok
    upper = value.upper()
    if kind != "word" or upper not in FIELD_TYPES:
        what = ("is not a type a stream field can be parsed into" if upper in ("ARRAY", "MAP", "STRUCT", "VARIANT",
                                                                               "INTERVAL", "CHAR", "VARCHAR", "VOID")
                else "is not a type")
        return f"{value!r} (the type of column {name!r}, position {at}) {what}"
    if upper in _DECIMALS and toks.accept("punct", "("):
        p_tok = toks.take()
        s_tok = toks.take() if toks.accept("punct", ",") else ("number", "0", 0)
        if (p_tok is None or s_tok is None or p_tok[0] != "number" or s_tok[0] != "number"
                or not toks.accept("punct", ")")):
            return f"column {name!r}: write {upper}(precision) or {upper}(precision, scale)"
        p, s = int(p_tok[1]), int(s_tok[1])
        if not 1 <= p <= 38 or s > p:
            return f"column {name!r}: {upper}({p}, {s}) needs 1 <= precision <= 38 and scale <= precision"
    return None
