"""Table names as each database reads them (parsing ``[schema.]table``, quoting, display), and where twopc's own tables
go (``twopcSchema``). Identifiers always reach SQL quoted, so a table or column name can never inject SQL."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace

from sqlalchemy.engine import Dialect

from twopc import ConfigurationError

from ._registry import dialect_for

__all__ = ["TableName", "bookkeeping_table", "parse_table_name", "parse_twopc_schema", "read_quoted", "sql_literal"]

log = logging.getLogger("twopc.sinks.sql")

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")
_QUOTES = {'"': '"', "`": "`", "[": "]"}
_QUOTE_NAMES = {'"': "double quotes", "`": "backticks", "[": "brackets"}


@dataclass(frozen=True)
class TableName:
    """A parsed ``[schema.]name`` as the database stores it (``schema`` ``None``: the connection's
    default; a database on MySQL); ``dialect`` decides how :meth:`display` quotes."""

    schema: str | None
    name: str
    dialect: str = ""

    def quoted(self, dialect: Dialect) -> str:
        """The name quoted by SQLAlchemy *dialect*'s preparer, for SQL text."""
        q = dialect.identifier_preparer.quote_identifier
        return f"{q(self.schema)}.{q(self.name)}" if self.schema else q(self.name)

    def display(self) -> str:
        """The name as a user would type it (quoted only where it has to be)."""
        dialect = dialect_for(self.dialect)
        plain, quote = dialect.shown_plain, dialect.name_quotes[0]

        def one(p: str) -> str:
            return p if plain.match(p) else quote + p.replace(quote, quote * 2) + quote

        return f"{one(self.schema)}.{one(self.name)}" if self.schema else one(self.name)

    __str__ = display

    def sibling(self, name: str) -> TableName:
        """A table with another name in the same schema."""
        return replace(self, name=name)


def parse_table_name(text: str, dialect_name: str, what: str = "dbtable") -> TableName:
    """Parse ``[schema.]table`` as the database would read it: quoted parts verbatim, unquoted ones plain
    identifiers, folded where the database folds them. Raises ``ConfigurationError``: the name is empty,
    malformed, or has more than two parts."""
    s = text.strip()
    if not s:
        raise ConfigurationError(f"{what} is empty: give a table name such as public.events")
    dialect = dialect_for(dialect_name)
    quotes = dialect.name_quotes
    parts: list[str] = []
    i = 0
    while True:
        if i < len(s) and s[i] in quotes:
            part, i = read_quoted(s, i, f"{what} {text!r}")
            parts.append(part)
        else:
            k = s.find(".", i)
            raw = s[i:] if k < 0 else s[i:k]
            if not _PLAIN.match(raw):
                raise ConfigurationError(
                    f"{what} {text!r}: {raw!r} is not a plain identifier; quote names with spaces, "
                    f"dots or special characters in {_QUOTE_NAMES[quotes[0]]}, e.g. "
                    f"{quotes[0]}{raw or 'name'}{_QUOTES[quotes[0]]}")
            parts.append(raw.lower() if dialect.folds_lower else raw)
            i = len(s) if k < 0 else k
        if i >= len(s):
            break
        if s[i] != ".":
            raise ConfigurationError(f"{what} {text!r}: expected '.' after a quoted name")
        i += 1
    if len(parts) > 2:
        raise ConfigurationError(f"{what} {text!r}: use [schema.]table")
    for part in parts:
        if (too_long := dialect.name_too_long(part)) is not None:
            raise ConfigurationError(f"{what} {text[:80]!r}: the name {part[:20]!r}... has {too_long}: use a "
                                     f"shorter name; nothing was written")
    schema, name = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
    return TableName(schema, name, dialect_name)


def read_quoted(s: str, i: int, where: str) -> tuple[str, int]:
    """The quoted name starting at ``s[i]`` (a doubled closing quote escapes it, but in ``[...]``) and the
    index after it; *where* begins the error messages. Raises ``ConfigurationError``: the quote is not
    closed, or the name is empty or holds NUL."""
    close = _QUOTES[s[i]]
    j, buf = i + 1, []
    while True:
        k = s.find(close, j)
        if k < 0:
            raise ConfigurationError(f"{where}: unterminated {s[i]} quote")
        buf.append(s[j:k])
        if k + 1 < len(s) and s[k + 1] == close and close != "]":
            buf.append(close)
            j = k + 2
            continue
        part = "".join(buf)
        if not part:
            raise ConfigurationError(f"{where}: empty quoted name")
        if "\x00" in part:
            raise ConfigurationError(f"{where}: a name cannot contain a NUL character")
        return part, k + 1


def parse_twopc_schema(text: str | None, dialect: str) -> str | None:
    """The ``twopcSchema`` option as the database stores the name, or None (also where the dialect has no twopc
    schemas). Raises ``ConfigurationError``: not one name."""
    if text is None:
        return None
    if not dialect_for(dialect).twopc_schemas:
        log.info("twopc: twopcSchema applies to PostgreSQL and MariaDB/MySQL; on %s twopc's tables stay in the "
                 "target's database", dialect)
        return None
    name = parse_table_name(text, dialect, "twopcSchema")
    if name.schema is not None:
        raise ConfigurationError(f"twopcSchema {text!r} has two parts; give one schema name such as twopc "
                                 f"(quote a name with a dot in it)")
    return name.name


def bookkeeping_table(table: TableName, schema: str | None, dialect: str, database: str) -> TableName:
    """*table* (one of twopc's) in *schema* when set and it names none, named by the dialect (MySQL: suffixed per URL
    *database*, which keeps its own tables as without the option). Raises ``ConfigurationError``: the name would be
    longer than MySQL/MariaDB allows."""
    if table.schema is not None or schema is None:
        return table
    return TableName(schema, dialect_for(dialect).bookkeeping_name(table.name, schema, database), table.dialect)


def sql_literal(text: str) -> str:
    """*text* as a SQL string literal (for statements sent without parameters)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
