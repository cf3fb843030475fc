"""psycopg errors in twopc's terms: which ones mean the session is gone, and the
credential-free :class:`~twopc.SinkError` every other one becomes."""

from __future__ import annotations

import re
from collections.abc import Callable

import psycopg
from psycopg import errors as pgerr

from twopc import SinkError
from twopc.spi import SinkUnavailableError, TargetConfigurationError

from ..sql._errors import ROLLED_BACK, bad_value, constraint_violated, lock_timed_out

__all__ = ["connect_failure", "diag", "error_code", "error_text", "is_connection_error", "is_missing_table",
           "map_error", "no_free_slot", "value_error"]

#: how to make room for a write's prepared transactions, for every message that lacks it
SLOT_FIXES = ("raise max_prepared_transactions (and restart PostgreSQL) to at least the partitions a batch writes "
              "plus retried attempts, write fewer partitions at once (df.coalesce(n)), resolve stale prepared "
              "transactions (`twopc status <checkpointLocation>` lists twopc's; pg_prepared_xacts all), or let "
              "twopc-jdbc stage what finds no slot (commitMode=auto, the default, or commitMode=staging)")

_CONSTRAINT_KINDS = {"23502": "NOT NULL", "23505": "unique", "23503": "foreign key", "23514": "check",
                     "23P01": "exclusion"}


def diag(exc: psycopg.Error) -> tuple[str, str]:
    """(SQLSTATE, primary message) of a driver error."""
    text = str(exc).strip()
    primary = exc.diag.message_primary or (text.splitlines()[0] if text else type(exc).__name__)
    return (exc.sqlstate or ""), primary


def error_text(exc: BaseException) -> str:
    if isinstance(exc, psycopg.Error):
        state, primary = diag(exc)
        return f"{state} {primary}".strip()
    return " ".join(str(exc).split()) or type(exc).__name__


def error_code(exc: BaseException) -> str:
    return getattr(exc, "sqlstate", None) or ""


def is_missing_table(exc: BaseException) -> bool:
    return isinstance(exc, pgerr.UndefinedTable)


def connect_failure(exc: BaseException) -> tuple[str, str]:
    reason = " ".join(str(exc).split()) or type(exc).__name__
    low = reason.lower()
    hint = ""
    if "password authentication failed" in low or "no password supplied" in low:
        hint = " (check the user and password options)"
    elif "connection refused" in low or "timeout" in low or "resolve host" in low:
        hint = " (check host and port, and that PostgreSQL accepts TCP connections)"
    elif "does not support ssl" in low:
        mode = _conn_param(exc, "sslmode") or "require"
        hint = (f" (sslmode={mode} needs TLS, which this server does not offer: enable TLS on the server "
                f"(ssl = on with a certificate in postgresql.conf), or connect with sslmode=prefer (TLS when the "
                f"server offers it) or sslmode=disable)")
    return reason, hint


def _conn_param(exc: BaseException, keyword: str) -> str | None:
    """A parameter psycopg kept on a failed connection attempt; never ask it for a secret."""
    pgconn = getattr(exc, "pgconn", None)
    for option in getattr(pgconn, "info", None) or ():
        if option.keyword == keyword.encode() and option.val:
            return bytes(option.val).decode("utf-8", "replace")
    return None


def is_connection_error(exc: BaseException) -> bool:
    """Whether *exc* means the session is gone (class 08, admin shutdown, a closed connection)."""
    if isinstance(exc, psycopg.OperationalError):
        state = getattr(exc, "sqlstate", None)
        return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")
    return isinstance(exc, psycopg.InterfaceError)


#: SQLSTATEs of a value its column cannot hold
_VALUE_KINDS = {"22003": "out of range", "22001": "too long", "22021": "invalid UTF-8"}


def value_error(exc: BaseException, action: str, table: str, redact: Callable[[str], str]) -> SinkError | None:
    """The :func:`~twopc.sinks.sql._errors.bad_value` error when *exc* says a value does not fit its
    column (named from COPY's context), else None."""
    state = getattr(exc, "sqlstate", None) or ""
    if state not in _VALUE_KINDS or not isinstance(exc, psycopg.Error):
        return None
    context = (exc.diag.context or "").splitlines()[0] if exc.diag.context else ""
    m = re.search(r", column (.+?)(?::|$)", context)
    column = m.group(1) if m else (exc.diag.column_name or "?")
    detail = redact(diag(exc)[1]) + (f" ({redact(context)})" if context else "")
    return bad_value(action, _VALUE_KINDS[state], column, table, detail)


def map_error(exc: BaseException, action: str, *, table: str, marker_table: str, lock_timeout: str,
              where: str, redact: Callable[[str], str]) -> SinkError:
    """The credential-free :class:`SinkError` (or :class:`SinkUnavailableError`) for a failed *action*."""
    if not isinstance(exc, psycopg.Error):
        return SinkError(f"could not {action}: {redact(error_text(exc))}. {ROLLED_BACK}")
    state, primary = diag(exc)
    primary = redact(primary)
    d = exc.diag
    if isinstance(exc, pgerr.LockNotAvailable):
        return lock_timed_out(action, lock_timeout, table, f"PostgreSQL: {primary}")
    if isinstance(exc, pgerr.IntegrityError):
        what = [f"{kind} {name!r}" for kind, name in (("column", d.column_name), ("constraint", d.constraint_name))
                if name]
        detail = f" {redact(d.message_detail)}" if d.message_detail and state in ("23505", "23503") else ""
        return constraint_violated(action, _CONSTRAINT_KINDS.get(state, "integrity"), ", ".join(what),
                                   d.table_name or table, primary + detail)
    if (bad := value_error(exc, action, table, redact)) is not None:
        return bad
    if is_connection_error(exc):
        return SinkUnavailableError(f"lost the connection to PostgreSQL at {where} while trying to "
                                    f"{action}: {redact(' '.join(str(exc).split()))}")
    if isinstance(exc, pgerr.UndefinedTable):
        return SinkError(f"could not {action}: {primary} (was the table or the marker table "
                         f"{marker_table} dropped? validate() creates the marker table)")
    context = f" ({redact(d.context.splitlines()[0])})" if d.context else ""
    if state == "53200":
        primary += (" (other users' prepared transactions took the slots left after this task claimed one): "
                    f"rerun the write; if it recurs, {SLOT_FIXES}")
    return SinkError(f"could not {action}: {state} {primary}{context}. {ROLLED_BACK}")


def no_free_slot(where: str, table: str, partition: int, limit: int, keys: int) -> TargetConfigurationError:
    return TargetConfigurationError(
        f"no free prepared-transaction slot on PostgreSQL at {where} for partition {partition} of the write to "
        f"{table}: max_prepared_transactions is {limit}, and the {max(keys, 0)} slot(s) that other users' prepared "
        f"transactions leave are all held by this write's other tasks or other twopc writes. Nothing of this "
        f"attempt was written. Fix: {SLOT_FIXES}")
