"""PyMySQL errors in twopc's terms: error codes, which mean the session is gone, and the
credential-free :class:`~twopc.SinkError` every other one becomes."""

from __future__ import annotations

import re
from collections.abc import Callable

import pymysql

from twopc import SinkError
from twopc.spi import SinkUnavailableError

from ..sql._errors import ROLLED_BACK, bad_value, constraint_violated, lock_timed_out

__all__ = ["connect_failure", "errmsg", "errno", "error_code", "error_text", "is_connection_error",
           "is_missing_table", "map_error", "value_error"]

# server error codes (MariaDB / MySQL share them unless noted)
ER_DBACCESS_DENIED = 1044
ER_ACCESS_DENIED = 1045
ER_BAD_NULL = 1048
ER_BAD_DB = 1049
ER_DUP_ENTRY = 1062
ER_TABLEACCESS_DENIED = 1142
ER_NO_SUCH_TABLE = 1146
ER_LOCK_WAIT_TIMEOUT = 1205
ER_LOCK_DEADLOCK = 1213
ER_SPECIFIC_ACCESS_DENIED = 1227
ER_NO_DEFAULT_FOR_FIELD = 1364
ER_XAER_NOTA = 1397
ER_XA_RBROLLBACK = 1402
ER_XA_RBTIMEOUT = 1613
ER_XA_RBDEADLOCK = 1614
ACCESS_DENIED = frozenset({ER_DBACCESS_DENIED, ER_TABLEACCESS_DENIED, ER_SPECIFIC_ACCESS_DENIED})
XA_ROLLED_BACK = frozenset({ER_XA_RBROLLBACK, ER_XA_RBTIMEOUT, ER_XA_RBDEADLOCK})
_CONSTRAINT_NAME = r"CONSTRAINT `((?:[^`]|``)*)`"
#: error code: (the constraint's kind, what names it, the patterns that find the name in the message)
_CONSTRAINTS: dict[int, tuple[str, str, tuple[str, ...]]] = {
    ER_DUP_ENTRY: ("unique", "key", (r"for key '([^']*)'",)),
    ER_BAD_NULL: ("NOT NULL", "column", (r"Column '([^']*)'",)),
    **dict.fromkeys((1216, 1217, 1451, 1452), ("foreign key", "constraint", (_CONSTRAINT_NAME,))),
    # MariaDB ER_CONSTRAINT_FAILED, MySQL ER_CHECK_CONSTRAINT_VIOLATED
    **dict.fromkeys((4025, 3819), ("check", "constraint", (_CONSTRAINT_NAME, r"constraint '([^']*)'")))}
_DATA_ERRORS = {1264: "out of range", 1406: "too long", 1366: "incorrect value", 1292: "incorrect value",
                1265: "truncated", 1367: "illegal value"}
#: errors that mean the session is gone (client CR_* codes are 2000-2999)
_CONNECTION_ERRORS = {1040, 1053, 1129, 1130, 1152, 1153, 1158, 1159, 1160, 1161, 1927, 4031}


def errno(exc: BaseException) -> int:
    """The server's (or client's) error code of *exc*, 0 when it has none."""
    return exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0


def errmsg(exc: BaseException) -> str:
    if len(exc.args) >= 2 and isinstance(exc.args[1], str):
        return " ".join(exc.args[1].split())
    return " ".join(str(exc).split()) or type(exc).__name__


def error_code(exc: BaseException) -> str:
    return str(errno(exc) or "")


def error_text(exc: BaseException) -> str:
    return f"{errno(exc)} {errmsg(exc)}"


def is_missing_table(exc: BaseException) -> bool:
    return errno(exc) == ER_NO_SUCH_TABLE


_UNREACHABLE = " (check host and port, and that the server accepts TCP connections)"
#: a failed connection's hint by error code (client CR_CONN_HOST_ERROR, CR_UNKNOWN_HOST: unreachable)
_CONNECT_HINTS = {ER_ACCESS_DENIED: " (check the user and password)", 2003: _UNREACHABLE, 2005: _UNREACHABLE,
                  ER_DBACCESS_DENIED: " (the user has no access to this database)"}


def connect_failure(exc: BaseException) -> tuple[str, str]:
    code = errno(exc)
    reason = f"{code} {errmsg(exc)}" if code else errmsg(exc)
    return reason, _CONNECT_HINTS.get(code, _UNREACHABLE if "timed out" in reason.lower() else "")


def is_connection_error(exc: BaseException) -> bool:
    """Whether *exc* means the session is gone (so its open transaction is too)."""
    if isinstance(exc, pymysql.err.InterfaceError):
        return True
    if isinstance(exc, pymysql.err.OperationalError):
        code = errno(exc)
        return code == 0 or 2000 <= code < 3000 or code in _CONNECTION_ERRORS
    return isinstance(exc, OSError)


def _named(msg: str, *patterns: str) -> str:
    for pattern in patterns:
        if m := re.search(pattern, msg):
            return m.group(1).replace("``", "`")
    return "?"


def value_error(exc: BaseException, action: str, table: str, redact: Callable[[str], str]) -> SinkError | None:
    """The :func:`~twopc.sinks.sql._errors.bad_value` error when *exc* says a value does not fit its
    column, else None; an incorrect 4-byte UTF-8 value means a utf8mb3 (or narrower) column."""
    if (code := errno(exc)) not in _DATA_ERRORS:
        return None
    msg = redact(errmsg(exc))
    col = _named(msg, r"column (?:`(?:[^`]|``)*`\.)*`((?:[^`]|``)*)` at row", r"column '([^']*)'")
    kind = _DATA_ERRORS[code]
    if code == 1366 and re.search(r"string value: '\\x[Ff][0-4]", msg):
        kind = "4-byte character"
    return bad_value(action, kind, col, table, msg)


def map_error(exc: BaseException, action: str, *, table: str, marker_table: str, lock_timeout: str,
              where: str, redact: Callable[[str], str]) -> SinkError:
    """The credential-free :class:`SinkError` (or :class:`SinkUnavailableError`) for a failed *action*."""
    code, msg = errno(exc), redact(errmsg(exc))
    if is_connection_error(exc):
        return SinkUnavailableError(f"lost the connection to MariaDB/MySQL at {where} while trying "
                                    f"to {action}: {code} {msg}")
    if code == ER_LOCK_WAIT_TIMEOUT:
        return lock_timed_out(action, lock_timeout, table, f"{code} {msg}")
    if code in (ER_LOCK_DEADLOCK, ER_XA_RBDEADLOCK):
        return SinkError(f"could not {action}: deadlock on {table} ({code} {msg}). {ROLLED_BACK}")
    if code in _CONSTRAINTS:
        kind, what, patterns = _CONSTRAINTS[code]
        return constraint_violated(action, kind, f"{what} {_named(msg, *patterns)!r}", table, msg)
    if code == ER_NO_DEFAULT_FOR_FIELD:
        col = _named(msg, r"Field '([^']*)'")
        return SinkError(f"could not {action}: column {col!r} of {table} is NOT NULL "
                         f"without a default and was not written: {msg}. {ROLLED_BACK}")
    if (bad := value_error(exc, action, table, redact)) is not None:
        return bad
    if code == ER_NO_SUCH_TABLE:
        return SinkError(f"could not {action}: {msg} (was the table or the marker table {marker_table} "
                         f"dropped? validate() creates the marker table)")
    if code in ACCESS_DENIED:
        return SinkError(f"could not {action}: permission denied: {msg}")
    if code in XA_ROLLED_BACK:
        return SinkError(f"could not {action}: the server had already rolled the XA transaction back "
                         f"({code} {msg}). {ROLLED_BACK}")
    return SinkError(f"could not {action}: MariaDB/MySQL error {code}: {msg}. {ROLLED_BACK}")
