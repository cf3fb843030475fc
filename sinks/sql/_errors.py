"""The messages every SQL sink gives for the same failure, so that PostgreSQL, MySQL/MariaDB
and the staging mode say the same thing the same way (each dialect maps its own error
codes onto these)."""

from __future__ import annotations

from twopc import SinkError, TargetConfigurationError

__all__ = ["ROLLED_BACK", "constraint_violated", "lock_timed_out", "session_init_failed"]

#: How every write error ends: nothing of the attempt survives it.
ROLLED_BACK = "The transaction was rolled back; nothing of this attempt was written"


def constraint_violated(action: str, kind: str, what: str, table: str, detail: str) -> SinkError:
    """A ``NOT NULL``/unique/foreign key/check... violation, naming the column or
    constraint (*what*; empty when the database did not say)."""
    return SinkError(f"could not {action}: {kind} constraint violated ({what or 'unnamed'}) on table "
                     f"{table}: {detail}. {ROLLED_BACK}")


def lock_timed_out(action: str, timeout: str, table: str, detail: str) -> SinkError:
    """A prepared-mode write that waited *timeout* for row locks (the ``lockTimeout``
    option): why that happens with prepared transactions, and what to do."""
    return SinkError(
        f"could not {action}: lock timeout ({timeout}) while waiting for rows of {table} held by "
        f"another prepared transaction: either another task of this write wrote the same unique key "
        f"(duplicate keys across partitions: deduplicate, or use upsertKeys / commitMode=staging), "
        f"or a prepared transaction of an earlier attempt, which twopc rolls back at the next "
        f"recovery (query restart). This attempt fails instead of waiting ({detail}). {ROLLED_BACK}")


def session_init_failed(where: str, detail: str) -> TargetConfigurationError:
    """Option ``sessionInitStatement`` failed when tried at validation (on the driver,
    before any task): which option, the server's reason, and the fix."""
    return TargetConfigurationError(
        f"option sessionInitStatement failed on {where}: {detail}. It runs at the start of every write "
        f"connection: fix the statement (try it in a SQL client as the same user) or remove the option; "
        f"nothing was written")
