"""The messages every SQL sink gives for the same failure (each dialect maps its error codes onto these)."""

from __future__ import annotations

from twopc import SinkError
from twopc.spi import TargetConfigurationError

__all__ = ["ROLLED_BACK", "bad_value", "constraint_violated", "lock_timed_out", "session_init_failed"]

#: How every write error ends: nothing of the attempt survives it.
ROLLED_BACK = "The transaction was rolled back; nothing of this attempt was written"


def constraint_violated(action: str, kind: str, what: str, table: str, detail: str) -> SinkError:
    """A constraint violation, naming the column or constraint (*what*) when the database did."""
    return SinkError(f"could not {action}: {kind} constraint violated ({what or 'unnamed'}) on table "
                     f"{table}: {detail}. {ROLLED_BACK}")


#: what to do about a value its column cannot hold, by the kind of problem
_VALUE_FIXES = {
    "out of range": "widen the column (a NUMERIC(p,s) with a larger precision p, or a wider integer type) or "
                    "round/cast the DataFrame column to fit",
    "too long": "widen the column (a longer VARCHAR(n), or TEXT) or shorten the values",
    "4-byte character": "change the column to utf8mb4 (ALTER TABLE {table} MODIFY {column} <its type> CHARACTER "
                        "SET utf8mb4, or ALTER TABLE {table} CONVERT TO CHARACTER SET utf8mb4): utf8mb3 cannot "
                        "store 4-byte characters such as emoji",
    "invalid UTF-8": "the DataFrame column holds bytes that are not valid UTF-8 (a binary value cast to string?): "
                     "repair them with make_valid_utf8() or drop those rows with is_valid_utf8() before writing",
}


def bad_value(action: str, kind: str, column: str, table: str, detail: str) -> SinkError:
    """A value its column cannot hold: the column, the server's words, the fix for *kind*, nothing written."""
    fix = _VALUE_FIXES.get(kind, "fix the values, or change the column's type to one that holds them")
    return SinkError(f"could not {action}: a value does not fit column {column!r} of {table} ({kind}): {detail}. "
                     f"Fix: {fix.format(table=table, column=column)}. {ROLLED_BACK}")


def lock_timed_out(action: str, timeout: str, table: str, detail: str) -> SinkError:
    """A prepared-mode write that waited *timeout* (``lockTimeout``) for row locks: why, and what to do."""
    return SinkError(
        f"could not {action}: lock timeout ({timeout}) while waiting for rows of {table} held by "
        f"another prepared transaction: either another task of this write wrote the same unique key "
        f"(duplicate keys across partitions: deduplicate, or use upsertKeys / commitMode=staging), "
        f"or a prepared transaction of an earlier attempt, which twopc rolls back at the next "
        f"recovery (query restart). This attempt fails instead of waiting ({detail}). {ROLLED_BACK}")


def session_init_failed(where: str, detail: str) -> TargetConfigurationError:
    """``sessionInitStatement`` failed at validation: the option, the server's reason, the fix."""
    return TargetConfigurationError(
        f"option sessionInitStatement failed on {where}: {detail}. It runs at the start of every write "
        f"connection: fix the statement (try it in a SQL client as the same user) or remove the option; "
        f"nothing was written")
