"""The handles of the built-in sinks (the ledger's on-disk formats), defined without their
drivers so that every process importing :mod:`twopc.sinks` reads any built-in kind back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twopc import TransactionHandle

__all__ = ["HttpHandle", "MySqlXaHandle", "PostgresHandle", "PreparedSqlHandle", "RedisHandle", "StagingHandle"]


@dataclass(frozen=True)
class PreparedSqlHandle(TransactionHandle):
    """A prepared SQL transaction; ``txn_id`` is its GID or XA gtrid, *table* the target table (for reports), *rows*
    the rows written (``-1`` when unknown: handles rebuilt by ``list_prepared``)."""

    table: str = ""
    rows: int = -1


@dataclass(frozen=True)
class PostgresHandle(PreparedSqlHandle, kind="twopc.postgres", version=1):
    """A prepared PostgreSQL transaction. ``txn_id`` is its GID."""


@dataclass(frozen=True)
class MySqlXaHandle(PreparedSqlHandle, kind="twopc.mysql_xa", version=1):
    """A prepared XA transaction. ``txn_id`` is its gtrid (bqual empty, formatID 1)."""


class _FieldsAdded:
    """A handle whose older versions lack only fields with defaults (``acks``, ``write``): they read as they are."""

    @classmethod
    def upgrade(cls, payload: dict[str, Any], version: int) -> dict[str, Any]:
        return payload


@dataclass(frozen=True)
class RedisHandle(_FieldsAdded, TransactionHandle, kind="twopc.redis", version=2):
    """A prepared Redis transaction: ``txn_id`` names its staging list.

    Attributes:
        hash_tag: the hash tag its keys were written under; empty: the sink's configured tag.
        staged: staging elements, ``-1`` when unknown.
        acks: sorted ``(stream, highest entry id)`` of the source entries its commit acknowledges (``ackGroup``).
    """

    hash_tag: str = ""
    staged: int = -1
    acks: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "acks", tuple((str(s), str(i)) for s, i in self.acks))  # JSON gives lists


@dataclass(frozen=True)
class StagingHandle(_FieldsAdded, TransactionHandle, kind="twopc.staging", version=2):
    """Rows of one task attempt, committed into the staging table under ``txn_id``.

    Attributes:
        table: the target table (display name).
        stage_table: the staging table (display name).
        rows: rows staged; ``-1`` when unknown.
        write: what the commit does to the target as the staging write was configured, so any process commits it
            alike: ``append``, ``errorifexists``, ``ignore``, or an overwrite's ``drop``, ``truncate`` or
            ``delete``; empty: as the committing sink is configured.
    """

    table: str = ""
    stage_table: str = ""
    rows: int = -1
    write: str = ""


@dataclass(frozen=True)
class HttpHandle(TransactionHandle, kind="twopc.http", version=1):
    """A task attempt's outbox of ``twopc-http``: ``txn_id`` names it (its path form), *outbox* is the folder (local
    or ``s3://``) holding ``<txn_id>.jsonl``, *requests* its requests (``-1`` when unknown)."""

    outbox: str = ""
    requests: int = -1
