"""What a database supplies to a prepared-transaction SQL sink: the :class:`SqlDialect` protocol, called by the writer
and the committer; it calls back into the writer only through :class:`TxnControl`, for the failure rules around
``PREPARE``. :class:`SqlTxn` is the open transaction of one task attempt that they pass around."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, NoReturn, Protocol, TypeVar

from twopc import TransactionContext

if TYPE_CHECKING:
    import pyarrow as pa
    from sqlalchemy.pool import PoolProxiedConnection

    from twopc.spi import Headroom

    from ._column_match import TableColumn
    from ._sql_target import SqlTarget

__all__ = ["SqlDialect", "SqlTxn", "TxnControl"]

C = TypeVar("C", bound="TableColumn")


@dataclass(eq=False)
class SqlTxn(Generic[C]):
    """The open transaction of one task attempt (process-local, never pickled): the pooled *conn* it writes on
    (``None`` once released), dict rows *pending* from :meth:`PreparedWriter.invoke`, why it *failed* (once rolled
    back), the dialect's *plans* per Arrow schema, its progress *state* (e.g. XA's ``active``/``idle``) and its
    *loader* (PostgreSQL: the COPY stream, dropped with the connection)."""

    context: TransactionContext
    gid: str
    conn: PoolProxiedConnection | None
    columns: list[C] = field(default_factory=list)
    rows: int = 0
    pending: list[dict[str, Any]] = field(default_factory=list)
    failed: str | None = None
    prepared: bool = False
    plans: dict[pa.Schema, Any] = field(default_factory=dict)
    state: str = "none"
    session_id: int = 0
    loader: Any = None


class TxnControl(Protocol[C]):
    """The writer's failure rules, which a dialect's :meth:`SqlDialect.prepare` may call."""

    def usable(self, txn: SqlTxn[C]) -> Any:
        """The DB-API connection of an open, unprepared transaction."""

    def marker_row(self, txn: SqlTxn[C]) -> tuple[str, tuple[Any, ...]]:
        """The marker row's ``INSERT`` and its parameters."""

    def release(self, txn: SqlTxn[C], *, broken: bool) -> None:
        """Give the connection back (or discard it when *broken*)."""

    def abandon(self, txn: SqlTxn[C], exc: BaseException) -> None:
        """Roll back after a non-driver error."""

    def fail(self, txn: SqlTxn[C], exc: BaseException, action: str) -> NoReturn:
        """Roll back and raise the credential-free :class:`twopc.SinkError`."""


class SqlDialect(Protocol[C]):
    """The SQL of one database for the prepared-transaction protocol. Driver errors propagate as
    the driver's exceptions unless a method says otherwise."""

    def __init__(self, target: SqlTarget) -> None:
        """Raises :class:`twopc.ConfigurationError` for options the database cannot serve."""

    def check_server(self, dbapi: Any) -> None:
        """Raise :class:`TargetConfigurationError` unless the server can prepare."""

    def table_columns(self, dbapi: Any, *, validating: bool) -> list[C]:
        """The table's columns; raises :class:`SchemaMismatchError` when missing, and when
        *validating* :class:`TargetConfigurationError` when it cannot be written."""

    def marker_columns(self, dbapi: Any) -> list[str] | None:
        """The marker table's column names, ``None`` when it does not exist."""

    def create_markers(self, dbapi: Any) -> None:
        """Create the marker table (concurrent creation is fine)."""

    def ensure_own_tables(self, dbapi: Any) -> None:
        """Check or create the dialect's own tables (PostgreSQL: the dead-letter table)."""

    def begin(self, txn: SqlTxn[C]) -> None:
        """Start the write transaction on ``txn.conn`` and read the columns into ``txn.columns``."""

    def load_rows(self, txn: SqlTxn[C], cols: list[C], keys: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
        """Write dict *rows* (their keys *keys*, matched to *cols*)."""

    def plan(self, schema: pa.Schema, cols: list[C]) -> Any:
        """How to load batches of *schema* into *cols* (kept per schema in ``txn.plans``)."""

    def load_batch(self, txn: SqlTxn[C], batch: pa.RecordBatch, plan: Any) -> None:
        """Write an Arrow batch by its *plan*."""

    def end_load(self, txn: SqlTxn[C]) -> None:
        """Finish loading before the marker (PostgreSQL ends its COPY here)."""

    def prepare(self, txn: SqlTxn[C], control: TxnControl[C]) -> None:
        """Write the marker, prepare, verify, release; on failure leave nothing prepared and raise."""

    def rollback(self, txn: SqlTxn[C]) -> bool:
        """Roll back ``txn``; whether the connection must be discarded. Never raises."""

    def finish(self, verb: str, gid: str) -> bool:
        """``COMMIT``/``ROLLBACK`` prepared *gid*: ``False`` if unknown. Raises :class:`twopc.SinkError`."""

    def finish_many(self, verb: str, gids: Sequence[str], *, recovering: bool) -> list[bool]:
        """:meth:`finish` for each of *gids* (*recovering*: most are probably finished already)."""

    def prepared_ids(self, prefix: str) -> list[str]:
        """Ids of prepared transactions (of this database, where it can tell) starting with *prefix*."""

    def prepared_elsewhere(self, gid: str) -> str | None:
        """Where else on the server *gid* is prepared (another database), if the server can tell."""

    def prepared_since(self, prefix: str) -> dict[str, float]:
        """Unix seconds each prepared id with *prefix* was prepared at, where the server records it."""

    def headroom(self) -> Headroom | None:
        """Prepared transactions the server holds for every user, against its limit."""
