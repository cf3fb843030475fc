"""The writer's user must be allowed every statement a write sends to twopc's own tables, checked
on the driver before any task runs by running each in a form that touches no row (the server
decides by its own grants); a refusal names the table, the missing privileges and the ``GRANT``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from twopc.spi import TargetConfigurationError

from ._registry import dialect_for

__all__ = ["Run", "dbapi_runner", "denied", "require_privileges"]

#: a statement needing exactly one privilege and touching no row ({t}: the table, {c}: the
#: columns the write inserts, {n}: as many NULLs, {c0}: the first of them)
_PROBES = {
    "SELECT": "SELECT 1 FROM {t} WHERE 1=0",
    "INSERT": "INSERT INTO {t} ({c}) SELECT {n} FROM (SELECT 1 AS x) AS q WHERE 1=0",
    "UPDATE": "UPDATE {t} SET {c0} = NULL WHERE 1=0",
    "DELETE": "DELETE FROM {t} WHERE 1=0",
}
#: permission denied: PostgreSQL's SQLSTATE; MariaDB/MySQL table, column, database access
_DENIED = frozenset({"42501", "1142", "1143", "1044"})

Run = Callable[[str], list[tuple[Any, ...]]]


def _code(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None) or exc  # SQLAlchemy wraps the driver's error
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int):  # PyMySQL's error number (its sqlstate is a class: 42000)
        return str(args[0])
    return str(getattr(orig, "sqlstate", None) or "")


def denied(exc: BaseException) -> bool:
    """Whether *exc* is the server refusing a statement for want of a privilege."""
    return _code(exc) in _DENIED


def dbapi_runner(dbapi: Any) -> Run:
    """A :data:`Run` on an autocommit DB-API connection (no parameters: nothing is %-unescaped)."""
    def run(query: str) -> list[tuple[Any, ...]]:
        cur = dbapi.cursor()
        try:
            cur.execute(query)
            return list(cur.fetchall()) if cur.description else []
        finally:
            cur.close()
    return run


def require_privileges(run: Run, dialect: str, *, table: str, display: str, columns: Sequence[str],
                       privileges: Sequence[str], role: str) -> None:
    """Raise ``TargetConfigurationError`` (naming the table, every missing privilege and the GRANT) unless the user
    may run each of *privileges*' statements on *table* (quoted; *columns*: the quoted columns the write inserts, which
    MariaDB's strict mode needs); other errors of *run*, which must leave the connection usable, propagate. Other
    dialects pass."""
    database = dialect_for(dialect)
    if not database.checks_privileges:
        return
    missing = []
    for privilege in privileges:
        try:
            run(_PROBES[privilege].format(t=table, c=", ".join(columns), n=", ".join("NULL" for _ in columns),
                                         c0=columns[0]))
        except Exception as exc:
            if _code(exc) not in _DENIED:
                raise
            missing.append(privilege)
    if missing:
        grant, user = ", ".join(missing), database.current_user(run)
        raise TargetConfigurationError(
            f"the user {user} has no {grant} privilege on {role} {display}, which every task of this write "
            f"needs: run as the table's owner: GRANT {grant} ON {display} TO {user}; then write again. Validation "
            f"stopped before any task: nothing was written")
