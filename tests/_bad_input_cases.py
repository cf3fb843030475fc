"""The table of bad-input classes of tests/spark/test_bad_input.py: one :class:`Case` an entry.

A case names the class of bad input, the format and server, the options it writes with
(built from the :class:`Run` of the case: its own table, sink id, checkpoint, Redis hash
tag), an optional setup, and what the user should see: ``expect`` lists the words the
first twopc line of the error must hold (the problem and the fix); an empty ``expect``
means the write succeeds and ``written`` rows arrive. Adding a class is adding an entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from ._bad_input_env import Logins

MAPPING = '[{"op": "INCRBY", "key": "{{%s}}:n", "by": 1}]'


@dataclass
class Run:
    """One case's own names and places."""

    logins: Logins
    table: str
    sink: str
    tag: str
    ck: Path
    out: Path
    sqlite: Path

    def pg_engine(self) -> sa.Engine:
        return sa.create_engine(self.logins.pg_sqlalchemy())

    def maria_engine(self) -> sa.Engine:  # PyMySQL sends a str password as Latin-1
        return sa.create_engine(self.logins.maria_sqlalchemy(),
                                connect_args={"password": self.logins.secret.password.encode("utf-8")})

    def sqlite_engine(self) -> sa.Engine:
        return sa.create_engine(f"sqlite:///{self.sqlite}")

    def engine(self, server: str) -> sa.Engine:
        return {"postgres": self.pg_engine, "mariadb": self.maria_engine, "sqlite": self.sqlite_engine}[server]()

    def runtime(self, version: str = "1") -> dict[str, str]:
        return {"checkpointLocation": str(self.ck), "txnVersion": version, "sinkId": self.sink}

    def pg(self, **extra: str) -> dict[str, str]:
        return {"url": self.logins.pg_jdbc(), "dbtable": self.table, **self.runtime(), **extra}

    def maria(self, **extra: str) -> dict[str, str]:
        return {"url": self.logins.maria_jdbc(), "dbtable": self.table, **self.runtime(), **extra}

    def sqlite_opts(self, **extra: str) -> dict[str, str]:
        return {"url": f"jdbc:sqlite:{self.sqlite}", "dbtable": self.table, **self.runtime(), **extra}

    def redis(self, **extra: str) -> dict[str, str]:
        return {"url": self.logins.redis_url(), "mapping": MAPPING % self.tag, "hashTag": self.tag,
                **self.runtime(), **extra}

    def file(self, **extra: str) -> dict[str, str]:
        return {"path": str(self.out), **self.runtime(), **extra}

    def stream(self, **extra: str) -> dict[str, str]:
        return {"url": self.logins.redis_url(), "streams": f"{{{self.tag}}}:s", "group": "g", **extra}


def create_table(server: str, *, key: bool = True, s_type: str = "text", name: str | None = None,
                 extra: str = "") -> Callable[[Run], None]:
    """A setup creating the case's table ``(id bigint [primary key], s <s_type>)``."""
    def setup(run: Run) -> None:
        eng = run.engine(server)
        s = "varchar(100)" if s_type == "text" and server == "mariadb" else s_type
        with eng.begin() as c:
            c.exec_driver_sql(f"CREATE TABLE {name or run.table} (id bigint {'PRIMARY KEY' if key else 'NOT NULL'}, "
                              f"s {s}{extra})")
        eng.dispose()
    return setup


def insert_row(server: str, row_id: int) -> Callable[[Run], None]:
    def setup(run: Run) -> None:
        create_table(server)(run)
        eng = run.engine(server)
        with eng.begin() as c:
            c.exec_driver_sql(f"INSERT INTO {run.table} VALUES ({row_id}, 'old')")
        eng.dispose()
    return setup


def file_at_checkpoint(run: Run) -> None:
    run.ck.parent.mkdir(parents=True, exist_ok=True)
    run.ck.write_text("not a folder")


def file_at_output(run: Run) -> None:
    run.out.parent.mkdir(parents=True, exist_ok=True)
    run.out.write_text("not a folder")


def dead_letter_with_wrong_types(run: Run) -> None:
    """The case's table refusing ids >= 3 (so a row goes to the dead-letter table) and a
    dead-letter table with twopc's column names but two wrong types."""
    create_table(PG, extra=", CHECK (id < 3)")(run)
    eng = run.engine(PG)
    with eng.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {run.table}_dead (sink_id integer, batch_id bigint, partition_id int, "
                          f"stream text, entry_id text, reason text, row integer)")
    eng.dispose()


def not_a_database(run: Run) -> None:
    run.sqlite.parent.mkdir(parents=True, exist_ok=True)
    (run.sqlite.parent / "notes.txt").write_text("these are notes, not a database\n" * 20)


def many(*setups: Callable[[Run], None]) -> Callable[[Run], None]:
    def setup(run: Run) -> None:
        for s in setups:
            s(run)
    return setup


@dataclass(frozen=True)
class Case:
    """One class of bad input (see the module docstring)."""

    name: str
    fmt: str
    server: str  # postgres | mariadb | sqlite | redis | file | stream
    options: Callable[[Run], dict[str, str]]
    expect: tuple[str, ...] = ()
    setup: Callable[[Run], None] | None = None
    rows: str = "spark.range(0, 4, numPartitions=2).selectExpr('id', \"concat('v', id) as s\")"
    written: int = 0
    #: rows the setup put in the table (still there after a failure)
    kept: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


PG, MARIA, LITE = "postgres", "mariadb", "sqlite"
J, P, R, F, S = "twopc-jdbc", "twopc-postgres", "twopc-redis", "twopc-file", "twopc-redis-stream"
LONG = "t" * 70

CASES: list[Case] = [
    # -- twopc-jdbc on PostgreSQL ---------------------------------------------------------------------
    Case("missing url", J, PG, lambda r: {k: v for k, v in r.pg().items() if k != "url"},
         ('needs option "url"', "jdbc:postgresql://")),
    Case("missing dbtable", J, PG, lambda r: {k: v for k, v in r.pg().items() if k != "dbtable"},
         ('needs option "dbtable"',)),
    Case("misspelled option", J, PG, lambda r: r.pg(lockTimout="5s"), ("lockTimout", "did you mean 'lockTimeout'?")),
    Case("misspelled runtime option", J, PG, lambda r: r.pg(txnVerison="2"),
         ("txnVerison", "did you mean 'txnVersion'?")),
    Case("raw & in a password in the JDBC URL", J, PG,
         lambda r: r.pg(url=r.logins.pg_jdbc(password_in_url=False) + f"&password={r.logins.secret.password}"),
         ("after password=", "URL-encode")),
    Case("raw / in a password in the user info", J, PG,
         lambda r: r.pg(url=r.logins.pg_jdbc(password_in_url=False).replace(
             "//", f"//{r.logins.pg_user}:{r.logins.secret.head}/x@", 1)),
         ("user info", "URL-encode")),
    Case("wrong password", J, PG, lambda r: r.pg(password=r.logins.secret.password + "x"),
         ("password authentication failed", "check the user and password")),
    Case("table does not exist (prepared)", J, PG, lambda r: r.pg(commitMode="prepared"),
         ("does not exist",)),
    Case("column missing from the table", J, PG, lambda r: r.pg(),
         ("s2",), setup=create_table(PG),
         rows="spark.range(0, 4).selectExpr('id', \"concat('v', id) as s\", 'id as s2')"),
    Case("type mismatch", J, PG, lambda r: r.pg(), ("s",), setup=create_table(PG, s_type="integer")),
    Case("table name longer than PostgreSQL's limit", J, PG, lambda r: r.pg(dbtable=LONG),
         ("at most 63 bytes", "use a shorter name")),
    Case("bad sessionInitStatement", J, PG, lambda r: r.pg(sessionInitStatement="SET no_such_setting = 1"),
         ("sessionInitStatement", "fix the statement"), setup=create_table(PG)),
    Case("txnVersion too big for BIGINT", J, PG, lambda r: {**r.pg(), "txnVersion": str(2**63)},
         ("txnVersion", "at most 9223372036854775807")),
    Case("txnVersion not a number", J, PG, lambda r: {**r.pg(), "txnVersion": "v1"},
         ("txnVersion must be a non-negative integer",)),
    Case("missing txnVersion", J, PG, lambda r: {k: v for k, v in r.pg().items() if k != "txnVersion"},
         ("txnVersion", 'option("txnVersion"')),
    Case("read-only Spark option numPartitions", J, PG, lambda r: r.pg(numPartitions="4"), ("df.coalesce",)),
    Case("isolationLevel NONE", J, PG, lambda r: r.pg(isolationLevel="NONE"), ("isolationLevel=NONE",)),
    Case("subquery as dbtable", J, PG, lambda r: r.pg(dbtable="(select 1) q"), ("subquery",)),
    Case("duplicate key across partitions (staging)", J, PG, lambda r: r.pg(commitMode="staging"),
         ("unique",), setup=insert_row(PG, 2), kept=1),
    Case("a file where the checkpoint folder should be", J, PG, lambda r: r.pg(),
         ("checkpoint",), setup=many(create_table(PG), file_at_checkpoint)),
    Case("numeric overflow", J, PG, lambda r: r.pg(), ("column 's'", "widen the column"),
         setup=create_table(PG, s_type="numeric(4,2)"),
         rows="spark.range(1, 2, numPartitions=1).selectExpr('id', 'cast(id * 1000.5 as decimal(10,2)) as s')"),
    Case("NUL byte in a string", J, PG, lambda r: r.pg(), ("column 's'", "NUL", "remove"),
         setup=create_table(PG), rows="spark.range(1, 2, numPartitions=1).selectExpr('id', \"concat('v', chr(0))"
                                      " as s\")"),
    Case("invalid UTF-8 in a string", J, PG, lambda r: r.pg(), ("column 's'", "make_valid_utf8"),
         setup=create_table(PG), rows="spark.range(1, 2, numPartitions=1).selectExpr('id', "
                                      "\"cast(unhex('C328') as string) as s\")"),
    Case("password with every URL-special character, URL-encoded: writes", J, PG, lambda r: r.pg(),
         setup=create_table(PG), written=4),
    # -- twopc-jdbc on MariaDB --------------------------------------------------------------------------
    Case("misspelled option (MariaDB)", J, MARIA, lambda r: r.maria(batchSise="10"),
         ("batchSise", "did you mean 'batchsize'?")),
    Case("table name longer than MariaDB's limit", J, MARIA, lambda r: r.maria(dbtable=LONG),
         ("at most 64", "use a shorter name")),
    Case("bad sessionInitStatement (MariaDB)", J, MARIA, lambda r: r.maria(sessionInitStatement="SET @@nope = 1"),
         ("sessionInitStatement", "fix the statement"), setup=create_table(MARIA)),
    Case("serverTimezone not UTC", J, MARIA, lambda r: r.maria(serverTimezone="Europe/Paris"),
         ("serverTimezone=Europe/Paris", "UTC")),
    Case("characterEncoding latin1", J, MARIA, lambda r: r.maria(characterEncoding="latin1"),
         ("characterEncoding=latin1", "UTF-8")),
    Case("copyFormat on MariaDB", J, MARIA, lambda r: r.maria(copyFormat="binary"),
         ("copyFormat", "remove the option")),
    Case("numeric overflow (MariaDB)", J, MARIA, lambda r: r.maria(), ("column 's'", "widen the column"),
         setup=create_table(MARIA, s_type="decimal(4,2)"),
         rows="spark.range(1, 2, numPartitions=1).selectExpr('id', 'cast(id * 1000.5 as decimal(10,2)) as s')"),
    Case("emoji into a utf8mb3 column", J, MARIA, lambda r: r.maria(), ("column 's'", "utf8mb4"),
         setup=create_table(MARIA, s_type="varchar(100) CHARACTER SET utf8mb3"),
         rows="spark.range(1, 2, numPartitions=1).selectExpr('id', \"concat('v', id, '\\U0001F600') as s\")"),
    Case("duplicate key (MariaDB XA)", J, MARIA, lambda r: r.maria(commitMode="prepared"),
         ("unique",), setup=insert_row(MARIA, 2), kept=1),
    # -- twopc-jdbc on SQLite ---------------------------------------------------------------------------
    Case("in-memory SQLite", J, LITE, lambda r: r.sqlite_opts(url="jdbc:sqlite::memory:"),
         ("in-memory", "give a file")),
    Case("commitMode=prepared on SQLite", J, LITE, lambda r: r.sqlite_opts(commitMode="prepared"),
         ("SQLite has no prepared transactions", "commitMode=staging")),
    Case("unknown SQLite URL parameter", J, LITE,
         lambda r: r.sqlite_opts(url=f"jdbc:sqlite:{r.sqlite}?journal_mod=wal"), ("journal_mod",)),
    Case("SQLite file in a folder that does not exist", J, LITE,
         lambda r: r.sqlite_opts(url=f"jdbc:sqlite:{r.sqlite.parent}/missing/lite.db"),
         ("missing/lite.db", "does not exist", "create the folder")),
    Case("SQLite path to a file that is not a database", J, LITE,
         lambda r: r.sqlite_opts(url=f"jdbc:sqlite:{r.sqlite.parent}/notes.txt"),
         ("notes.txt", "not a SQLite database", "point the url at a SQLite database file"), setup=not_a_database),
    Case("duplicate key (SQLite staging)", J, LITE, lambda r: r.sqlite_opts(), ("unique",),
         setup=insert_row(LITE, 2), kept=1),
    # -- twopc-postgres ---------------------------------------------------------------------------------
    Case("misspelled option (twopc-postgres)", P, PG, lambda r: r.pg(LockTimout="5s"),
         ("locktimout", "did you mean 'lockTimeout'?")),
    Case("invalid sslmode option", P, PG, lambda r: r.pg(sslmode="requried"), ("sslmode must be one of",)),
    Case("sslmode=require is honoured, not ignored", P, PG, lambda r: r.pg(sslmode="require"),
         ("sslmode=require", "does not support SSL", "127.0.0.1:", "enable TLS", "sslmode=prefer"),
         setup=create_table(PG)),
    Case("sslmode=require in the URL of a server without TLS", J, PG,
         lambda r: r.pg(url=r.logins.pg_jdbc() + "&sslmode=require"),
         ("sslmode=require", "does not support SSL", "127.0.0.1:", "enable TLS", "sslmode=prefer"),
         setup=create_table(PG)),
    Case("dead-letter table with wrong column types", P, PG, lambda r: r.pg(deadLetterTable=r.table + "_dead"),
         ("_dead", "sink_id integer", "expected text", "row integer", "expected jsonb", "ALTER TABLE", "drop"),
         setup=dead_letter_with_wrong_types),
    Case("staging-only option on twopc-postgres", P, PG, lambda r: r.pg(upsertKeys="id"),
         ("upsertKeys", "use format twopc-jdbc")),
    Case("MySQL URL given to twopc-postgres", P, PG, lambda r: r.pg(url=r.logins.maria_jdbc()),
         ("writes to PostgreSQL", "twopc-jdbc")),
    # -- twopc-redis ------------------------------------------------------------------------------------
    Case("misspelled option (twopc-redis)", R, "redis", lambda r: r.redis(hashTg="x"),
         ("hashtg", "did you mean 'hashTag'?")),
    Case("mapping is not JSON", R, "redis", lambda r: r.redis(mapping="[{op: INCRBY"), ("mapping",)),
    Case("missing mapping", R, "redis", lambda r: {k: v for k, v in r.redis().items() if k != "mapping"},
         ('"mapping"',)),
    Case("wrong Redis password", R, "redis", lambda r: r.redis(password=r.logins.secret.password + "x"),
         ("password",)),
    Case("parameter after password= in the Redis URL", R, "redis",
         lambda r: r.redis(url=r.logins.redis_url().split("@")[1].join(["redis://", ""]) +
                           f"?password={r.logins.secret.head}&{r.logins.secret.tail}=1"),
         ("after password=", "URL-encode")),
    Case("invalid durability", R, "redis", lambda r: r.redis(durability="sometimes"), ("durability",)),
    # -- twopc-file -------------------------------------------------------------------------------------
    Case("unknown option (twopc-file)", F, "file", lambda r: r.file(compresion="zstd"), ("compresion",)),
    Case("no output folder", F, "file", lambda r: {k: v for k, v in r.file().items() if k != "path"},
         ("output folder", '.option("path"')),
    Case("a file where the output folder should be (twopc-file)", F, "file", lambda r: r.file(),
         ("is a file", 'option "path"'), setup=file_at_output),
    Case("a file where the checkpoint folder should be (twopc-file)", F, "file", lambda r: r.file(),
         ("checkpoint",), setup=file_at_checkpoint),
    # -- twopc-redis-stream (source) --------------------------------------------------------------------
    Case("misspelled option (twopc-redis-stream)", S, "stream", lambda r: r.stream(maxEntriesPerTriger="5"),
         ("maxentriespertriger", "did you mean 'maxEntriesPerTrigger'?")),
    Case("missing group", S, "stream", lambda r: {k: v for k, v in r.stream().items() if k != "group"}, ('"group"',)),
    Case("bad startingPosition", S, "stream", lambda r: r.stream(startingPosition="yesterday"), ("startingPosition",)),
    Case("fieldsSchema that does not parse", S, "stream", lambda r: r.stream(fieldsSchema="amount BIGNT, user STRING"),
         ("fieldsSchema", "'amount BIGNT, user STRING'", "BIGNT", "e.g.", "amount BIGINT")),
    Case("fieldsSchema with a column without a type", S, "stream",
         lambda r: r.stream(fieldsSchema="amount, user STRING"),
         ("fieldsSchema", "'amount, user STRING'", "no type", "e.g.")),
]
