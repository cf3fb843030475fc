"""The decision ledger in the target (:mod:`twopc._target`) for the prepared SQL sinks: records
as rows of ``twopc_ledger`` (in ``twopcSchema``, else the marker table's schema), created by one
``INSERT`` each (the primary key makes a second create fail), and the writers' leases as session
locks on the same server (``pg_try_advisory_lock``, ``GET_LOCK``). A lease is held by the
driver's agent (:mod:`twopc.ledger._agent`) for the whole write, since Spark's Python workers
may be killed or not reused; the server frees it when the agent's session ends."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import socket
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from twopc import ConfigurationError, FencedError, LedgerError, SinkError
from twopc.spi import ConcurrentWriterError, TargetConfigurationError
from twopc.spi.lease import EPHEMERAL_PREFIX, DriverIdentity, Lease, driver_identity
from twopc.spi.lease import start_ticks as _start_ticks

from ._engines import dbapi_connect_params
from ._names import TableName, parse_table_name
from ._sql_target import SqlTarget, give_back, log

__all__ = ["LEASE_RECORDS", "LEDGER_TABLE", "SqlLedgerStore", "SqlTargetLedger", "sweep_lease_records"]

LEDGER_TABLE = "twopc_ledger"  #: The ledger table's name (in ``twopcSchema``, else in the marker table's schema).
#: The name (before ``-<uid>``) of this user's folder of kept leases' records in the temp dir.
LEASE_RECORDS = "twopc-leases"
_REPLY_GRACE = 5.0  # beyond the agent's own bound for a lease, before its silence counts as no answer


def sweep_lease_records(folder: Path) -> None:
    """Delete the lease records in *folder* whose holder process on this host is gone (it
    was killed: a holder that ends deletes its record itself). Never raises."""
    host = socket.gethostname()
    for path in folder.glob("*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            lease = json.loads(path.read_text(encoding="utf-8"))["lease"]
            if lease["host"] == host and _start_ticks(int(lease["holder_pid"])) != lease["holder_started"]:
                path.unlink()


class SqlTargetLedger:
    """The target ledger of a prepared SQL sink (picklable: configuration only)."""

    def __init__(self, target: SqlTarget) -> None:
        self.target = target
        self.table = target.options.bookkeeping(TableName(None if target.options.twopc_schema else target.marker.schema,
                                                          LEDGER_TABLE, target.database.name))
        #: the ledger table's name, quoted and qualified for the target
        self.quoted = target.qualified(self.table)

    @property
    def location(self) -> str:
        return f"{self.target.database.product} {self.target.where()} table {self.table.display()}"

    def _lock(self, sink_id: str) -> tuple[str, str, Any]:
        return self.target.database.lease_sql(sink_id, self.target.options.url.database or "")

    def run(self, query: str, params: Sequence[Any] = (), *, fetch: bool = False, action: str) -> list[tuple[Any, ...]]:
        """One statement on the sink's control connection; driver errors as a SinkError."""
        with self.target.mapped(action):
            return self.target.control_execute(query, params, fetch=fetch)[1]

    def ensure_table(self) -> None:
        """Create the ledger table when missing and check the user's privileges on it. Raises ``SinkError``: it cannot
        be created (the message has the DDL to run as an owner); ``TargetConfigurationError``: a privilege on it is
        missing (the message has the GRANT)."""
        from ._privileges import dbapi_runner, require_privileges  # the plan's checks: workers make none
        ddl = self.target.database.ledger_ddl.format(table=self.quoted)
        if (schema := self.target.options.twopc_schema) is not None:
            self.target.control_run(lambda dbapi: self.target.database.ensure_schema(
                dbapi_runner(dbapi), schema, self.target.options.url.database or ""))
        db = self.target.database
        try:  # a table an owner created (as the message below says) needs no CREATE privilege
            self.target.control_execute(f"SELECT 1 FROM {self.quoted} WHERE 1=0")
        except db.driver_error:  # missing, or not readable: the CREATE or the privilege check says which
            try:
                self.target.control_execute(ddl)
            except db.driver_error as exc:
                if db.error_code(exc) in db.unique_violations:
                    return  # created concurrently (PostgreSQL's catalog race)
                raise SinkError(f"cannot create the ledger table {self.table.display()} on {self.target.where()} "
                                f"({self.target.redact(db.error_text(exc))}): create it once as an owner with: "
                                f"{ddl}; and grant SELECT, INSERT, UPDATE, DELETE on it to the writer's user. Or give "
                                f"the write a checkpointLocation") from None
        cols = [self.target.quote(c) for c in ("sink_id", "name", "body")]
        with self.target.mapped(f"check the privileges on {self.table.display()}"):  # the records are inserted,
            self.target.control_run(lambda dbapi: require_privileges(  # replaced, read and deleted by this driver
                dbapi_runner(dbapi), db.name, table=self.quoted, display=self.table.display(), columns=cols,
                privileges=("SELECT", "INSERT", "UPDATE", "DELETE"), role="the ledger table"))

    def store(self, sink_id: str, lease: Lease | None = None) -> SqlLedgerStore:
        return SqlLedgerStore(self, sink_id, lease)

    def writers(self) -> list[str]:
        rows = self.target.read_if_exists(f"SELECT DISTINCT sink_id FROM {self.quoted}", (),
                                          f"list the writers in {self.table.display()}")
        return sorted(str(r[0]) for r in rows)

    def forget(self, sink_id: str) -> None:
        self.run(f"DELETE FROM {self.quoted} WHERE sink_id = %s", (sink_id,),
                 action=f"delete the records of {sink_id} from {self.table.display()}")

    def _record(self, sink_id: str) -> Path:
        """Where this machine notes the lease a streaming query keeps across its plans (``<temp
        dir>/twopc-leases-<uid>/<hash>.json``). Raises ``ConfigurationError``: the folder is not this user's alone."""
        # loaded where leases are taken and let go: a task's worker never loads the agent
        from twopc.spi.lease import private_dir
        folder = private_dir(LEASE_RECORDS)
        if folder is None:
            raise ConfigurationError(
                f"{Path(tempfile.gettempdir(), f'{LEASE_RECORDS}-{os.getuid()}')} is not a folder of this user's alone "
                f"(mode 0700, owned by uid {os.getuid()}), so a streaming query cannot note the lease it keeps there: "
                f"remove it and start the query again")
        where = hashlib.sha256(f"{self.location}\n{sink_id}".encode()).hexdigest()[:32]
        return folder / f"{where}.json"

    def _kept(self, sink_id: str, driver: DriverIdentity) -> Lease | None:
        sweep_lease_records(self._record(sink_id).parent)
        try:
            data = json.loads(self._record(sink_id).read_text(encoding="utf-8"))
            lease = Lease(**data["lease"])
            mine = data["driver"] == dict(driver)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        alive = _start_ticks(lease.holder_pid) == lease.holder_started
        return lease if mine and alive and lease.sink_id == sink_id and self.holds(lease) else None

    def lease_request(self, sink_id: str, *, record: Path | None = None) -> dict[str, Any]:
        """The driver agent's request that takes *sink_id*'s lease (and deletes *record* when it
        ends), as plain values; it holds credentials: never log it."""
        options = self.target.options
        timeouts = options.net_timeouts()
        module, connect = dbapi_connect_params(options.url, timeouts)
        try_lock, _unlock, key = self._lock(sink_id)
        return {"op": "take", "sink_id": sink_id, "module": module, "connect": connect, "try_lock": try_lock,
                "key": key, "bound_seconds": timeouts.connect + timeouts.reply,
                "record": str(record) if record else None,
                "session_sql": self.target.database.session_id_sql}

    def acquire(self, sink_id: str, *, keep: bool = False) -> Lease:
        """Ask the driver's agent to take *sink_id*'s lease, checking the ledger table meanwhile; with *keep*
        (streaming), a lease this driver already holds is returned as it is. Raises ``ConcurrentWriterError``: another
        writer holds the lease of *sink_id*; ``SinkError`` / ``SinkUnavailableError``: the server failed, or the agent
        did not start."""
        from twopc.spi.lease import DriverAgent, ask_agent  # see _record
        driver = driver_identity()
        if keep and (kept := self._kept(sink_id, driver)) is not None:
            return kept
        self._refuse_records_elsewhere(sink_id)
        request = self.lease_request(sink_id, record=self._record(sink_id) if keep else None)
        agent, timeout = DriverAgent(driver), float(request["bound_seconds"]) + _REPLY_GRACE
        # the ledger table is checked while the agent starts (the driver's first write) or takes the lease
        pending = agent.send(request, timeout) if agent.running() is not None else None
        if pending is None:
            agent.start()
        try:
            self.ensure_table()
        except BaseException:
            held = pending.answer() if pending is not None else []
            if pending is not None and held[:1] == ["held"] and len(held) == 2:
                ask_agent(pending.pid, {"op": "release", "sink_id": sink_id, "session": int(held[1])}, _REPLY_GRACE)
            raise
        pending = pending or agent.send(request, timeout)
        pid, line = pending.pid, pending.answer()
        if line[:1] == ["held"] and len(line) == 2:
            lease = Lease(sink_id, int(line[1]), pid, _start_ticks(pid) or 0, socket.gethostname())
            if keep:
                with contextlib.suppress(OSError):
                    self._record(sink_id).write_text(json.dumps({"lease": dataclasses.asdict(lease),
                                                                 "driver": dict(driver)}), encoding="utf-8")
            log.info("twopc: sink %s holds its lease on %s (session %s)", sink_id, self.target.where(), lease.session)
            return lease
        if line[:1] == ["busy"]:
            raise ConcurrentWriterError(
                f"another writer with sink id {sink_id!r} is running against {self.target.where()} (it holds the "
                f"sink id's lease there): two writers with one sink id would roll back each other's transactions. "
                f"Give each writer its own sinkId (or txnAppId), or wait until the other one ends")
        raise SinkError(f"the driver agent could not take the lease of sink id {sink_id!r} on {self.target.where()} "
                        f"({' '.join(line[1:]) or 'no answer'}): check the server is reachable from the driver")

    def _refuse_records_elsewhere(self, sink_id: str) -> None:
        """Refuse a writer whose records are in the ledger table it used without ``twopcSchema``: reading an empty
        one here, it would write its batches again. Raises ``TargetConfigurationError``: records are there (the
        message has the statements that move them)."""
        if self.target.options.twopc_schema is None or sink_id.startswith(EPHEMERAL_PREFIX):
            return
        marker = parse_table_name(self.target.options.marker_table, self.target.database.name, "markerTable")
        old = marker.sibling(LEDGER_TABLE)
        rows = self.target.read_if_exists(f"SELECT count(*) FROM {self.target.qualified(old)} WHERE sink_id = %s",
                                          (sink_id,), f"read {old.display()}")
        if rows and int(rows[0][0]):
            raise TargetConfigurationError(
                f"the writer {sink_id!r} keeps {int(rows[0][0])} ledger records (its committed txnVersions and "
                f"decisions) in {old.display()}, and with twopcSchema={self.target.options.twopc_schema} it would read "
                f"{self.table.display()}, where they are not: it would write its committed batches again. Nothing was "
                f"written. Move them once, as an owner: INSERT INTO {self.quoted} SELECT * FROM "
                f"{self.target.qualified(old)} WHERE sink_id = '{sink_id}'; DELETE FROM {self.target.qualified(old)} "
                f"WHERE sink_id = '{sink_id}'; or write without twopcSchema")

    def holds(self, lease: Lease) -> bool:
        query, params = self.target.database.lease_holder_sql(self._lock(lease.sink_id)[2], lease.session)
        rows = self.run(query, params, fetch=True, action="check the lease")
        return bool(rows) and rows[0][0] is not None and int(rows[0][0]) > 0

    def release(self, lease: Lease) -> None:
        """Ask the lease's agent to close the session holding it. Never raises."""
        from twopc.spi.lease import ask_agent  # see _record
        if lease.host != socket.gethostname() or _start_ticks(lease.holder_pid) != lease.holder_started:
            return  # gone already (or another process has its id now)
        with contextlib.suppress(Exception):  # the agent frees it at the latest when the driver ends
            ask_agent(lease.holder_pid, {"op": "release", "sink_id": lease.sink_id, "session": lease.session},
                      _REPLY_GRACE)

    @contextlib.contextmanager
    def take(self, sink_id: str) -> Iterator[bool]:
        try_lock, unlock, key = self._lock(sink_id)
        conn = self.target.checkout()
        broken = False
        try:
            with conn.driver_connection.cursor() as cur:  # type: ignore[union-attr]  # a checked-out connection has its DB-API connection
                cur.execute(try_lock, (key,))
                got = bool(cur.fetchone()[0])
            try:
                yield got
            finally:
                if got:
                    with conn.driver_connection.cursor() as cur:  # type: ignore[union-attr]  # as above
                        cur.execute(unlock, (key,))
        except self.target.database.driver_error as exc:
            broken = True
            raise self.target.map_error(exc, f"take the lease of {sink_id}") from None
        finally:
            give_back(conn, broken=broken)


class SqlLedgerStore:
    """One writer's ledger records (:class:`twopc.ledger._stores.Records`), one row named
    ``<kind>/<name>`` each; with a lease, writing a decision first checks it is still held."""

    def __init__(self, backend: SqlTargetLedger, sink_id: str, lease: Lease | None) -> None:
        self.backend = backend
        self.sink_id = sink_id
        self.lease = lease
        self.root = f"{backend.location} sink {sink_id}"

    def where(self, kind: str, name: str) -> str:
        return f"{self.root}: {_row(kind, name)}"

    def _run(self, query: str, params: Sequence[Any], *, fetch: bool = False, what: str) -> list[tuple[Any, ...]]:
        try:
            return self.backend.run(query, params, fetch=fetch, action=what)
        except SinkError as exc:
            raise LedgerError(f"cannot {what} in {self.root}: {exc}") from None

    def record(self, kind: str, name: str) -> str | None:
        rows = self._run(f"SELECT body FROM {self.backend.quoted} WHERE sink_id = %s AND name = %s",
                         (self.sink_id, _row(kind, name)), fetch=True, what=f"read ledger record {_row(kind, name)}")
        return str(rows[0][0]) if rows else None

    def names(self, kind: str) -> list[str]:
        rows = self._run(f"SELECT name FROM {self.backend.quoted} WHERE sink_id = %s", (self.sink_id,), fetch=True,
                         what=f"list ledger records {kind}")
        prefix = _row(kind, "")
        names = [str(r[0])[len(prefix):] for r in rows if str(r[0]).startswith(prefix)]
        return sorted(n for n in names if n and "/" not in n and not n.startswith("."))

    def add(self, kind: str, name: str, text: str) -> bool:
        target = self.backend.target
        try:
            target.control_execute(f"INSERT INTO {self.backend.quoted} (sink_id, name, body) VALUES (%s, %s, %s)",
                                    (self.sink_id, _row(kind, name), text))
        except target.database.driver_error as exc:
            if target.database.error_code(exc) in target.database.unique_violations:
                return False
            raise LedgerError(f"cannot write ledger record {_row(kind, name)} in {self.root}: "
                              f"{target.map_error(exc, 'write a ledger record')}") from None
        except SinkError as exc:
            raise LedgerError(f"cannot write ledger record {_row(kind, name)} in {self.root}: {exc}") from None
        return True

    def put(self, kind: str, name: str, text: str, *, durable: bool) -> None:
        """Every row is committed when written: *durable* or not."""
        sql = self.backend.target.database.ledger_upsert.format(table=self.backend.quoted)
        self._run(sql, (self.sink_id, _row(kind, name), text), what=f"write ledger record {_row(kind, name)}")

    def remove(self, kind: str, name: str) -> None:
        self._run(f"DELETE FROM {self.backend.quoted} WHERE sink_id = %s AND name = %s",
                  (self.sink_id, _row(kind, name)), what=f"delete ledger record {_row(kind, name)}")

    def write_decision(self, name: str, text: str) -> bool:
        if self.lease is not None and not self.backend.holds(self.lease):
            raise FencedError(
                f"this write (sink id {self.sink_id}) lost its lease on {self.backend.target.where()}: the connection "
                f"that held it is gone, so another writer may be resolving its transactions. It records and commits "
                f"nothing; the next write to the server rolls its transactions back")
        return self.add("decisions", name, text)


def _row(kind: str, name: str) -> str:
    return f"{kind}/{name}" if kind else name
