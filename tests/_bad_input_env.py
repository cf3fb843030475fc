"""What the bad-input suite (tests/spark/test_bad_input.py) runs against: a login on each server
whose password holds every URL-special character, the servers' statement logs, and the
checks every case ends with (nothing left behind, no secret anywhere).

- :class:`Secret`: the password (two random tokens around ``& = ? # / @ : ; % +``, a
  space, quotes and a non-ASCII character), and :meth:`Secret.found_in`, which finds any
  piece of it holding a token.
- :class:`Logins`: a PostgreSQL role, a MariaDB user and a Redis ACL user with that
  password, each owning a schema/database of its own, created before the statement logs
  are switched on (so the CREATE statements are not what the scan finds).
- :class:`StatementLogs`: PostgreSQL ``log_statement=all`` (read from the local server's
  log file), the MariaDB general log (``log_output=TABLE``), Redis ``MONITOR`` (a
  ``redis-cli`` writing to a file; Redis itself never shows an ``AUTH``'s arguments there).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url

from twopc.faultinject._redis_cluster import find_redis_cli


def uid() -> str:
    return uuid.uuid4().hex[:10]


@dataclass(frozen=True)
class Secret:
    """A password no scan may find, in any spelling, in any piece."""

    head: str = field(default_factory=lambda: "Zq" + uid())
    tail: str = field(default_factory=lambda: "Kx" + uid())

    @property
    def password(self) -> str:
        return f"{self.head}&=?#/@:;%+ 'q\"\u2603{self.tail}"

    @property
    def quoted(self) -> str:
        return urllib.parse.quote(self.password, safe="")

    def found_in(self, text: str) -> list[str]:
        """The tokens of the password found in *text* (each is in every piece a leak
        would show, raw, URL-quoted or SQL-escaped)."""
        return [t for t in (self.head, self.tail) if t in text]


@dataclass
class Logins:
    """The URLs of one login per server, all with :attr:`secret`'s password."""

    secret: Secret
    pg_admin: str
    maria_admin: str
    redis_admin: str
    pg_tcp: str = ""
    """Any URL of the PostgreSQL server over TCP (its host and port are used)."""
    pg_user: str = ""
    pg_schema: str = ""
    maria_user: str = ""
    maria_db: str = ""
    redis_user: str = ""

    def create(self) -> None:
        pw = self.secret.password
        self.pg_user = self.pg_schema = f"bad_{uid()}"
        eng = sa.create_engine(self.pg_admin, isolation_level="AUTOCOMMIT")
        with eng.connect() as c:
            lit = pw.replace("'", "''")
            c.exec_driver_sql(f"CREATE ROLE {self.pg_user} LOGIN PASSWORD '{lit}'".replace("%", "%%"))
            c.exec_driver_sql(f"CREATE SCHEMA {self.pg_schema} AUTHORIZATION {self.pg_user}")
            c.exec_driver_sql(f"ALTER ROLE {self.pg_user} SET search_path = {self.pg_schema}")
            c.exec_driver_sql(f"GRANT CONNECT ON DATABASE {make_url(self.pg_admin).database} TO {self.pg_user}")
        eng.dispose()
        self.maria_user = self.maria_db = f"bad_{uid()}"
        eng = sa.create_engine(self.maria_admin)
        with eng.begin() as c:
            lit = pw.replace("\\", "\\\\").replace("'", "\\'")
            c.exec_driver_sql(f"CREATE USER '{self.maria_user}'@'%' IDENTIFIED BY '{lit}'".replace("%", "%%"))
            c.exec_driver_sql(f"CREATE DATABASE {self.maria_db}")
            c.exec_driver_sql(f"GRANT ALL PRIVILEGES ON {self.maria_db}.* TO '{self.maria_user}'@'%%'")
            with contextlib.suppress(sa.exc.DBAPIError):  # MySQL 8 only: XA RECOVER of other sessions
                c.exec_driver_sql(f"GRANT XA_RECOVER_ADMIN ON *.* TO '{self.maria_user}'@'%%'")
        eng.dispose()
        self.redis_user = f"bad_{uid()}"
        r = redis.Redis.from_url(self.redis_admin)
        r.execute_command("ACL", "SETUSER", self.redis_user, "on", f">{pw}", "~*", "&*", "+@all")
        r.close()

    def drop(self) -> None:
        eng = sa.create_engine(self.pg_admin, isolation_level="AUTOCOMMIT")
        with eng.connect() as c:
            c.exec_driver_sql(f"DROP SCHEMA IF EXISTS {self.pg_schema} CASCADE")
            c.exec_driver_sql(f"DROP OWNED BY {self.pg_user}")
            c.exec_driver_sql(f"DROP ROLE IF EXISTS {self.pg_user}")
        eng.dispose()
        eng = sa.create_engine(self.maria_admin)
        with eng.begin() as c:
            c.exec_driver_sql(f"DROP DATABASE IF EXISTS {self.maria_db}")
            c.exec_driver_sql(f"DROP USER IF EXISTS '{self.maria_user}'@'%%'")
        eng.dispose()
        r = redis.Redis.from_url(self.redis_admin)
        r.execute_command("ACL", "DELUSER", self.redis_user)
        r.close()

    # -- URLs of the login -------------------------------------------------------------------
    def pg_jdbc(self, *, password_in_url: bool = True) -> str:
        u = make_url(self.pg_tcp)
        q = f"?user={self.pg_user}" + (f"&password={self.secret.quoted}" if password_in_url else "")
        return f"jdbc:postgresql://{u.host}:{u.port}/{u.database}{q}"

    def pg_sqlalchemy(self) -> str:
        u = make_url(self.pg_tcp)
        return URL.create("postgresql+psycopg", self.pg_user, self.secret.password, u.host, u.port,
                          u.database).render_as_string(hide_password=False)

    def maria_jdbc(self) -> str:
        u = make_url(self.maria_admin)
        return f"jdbc:mariadb://{u.host}:{u.port}/{self.maria_db}?user={self.maria_user}&password={self.secret.quoted}"

    def maria_sqlalchemy(self) -> str:
        u = make_url(self.maria_admin)
        return URL.create("mysql+pymysql", self.maria_user, self.secret.password, u.host, u.port,
                          self.maria_db).render_as_string(hide_password=False)

    def redis_url(self) -> str:
        u = urllib.parse.urlsplit(self.redis_admin)
        return f"redis://{self.redis_user}:{self.secret.quoted}@{u.hostname}:{u.port}/0"


class StatementLogs:
    """Every statement the three servers receive while the suite runs."""

    def __init__(self, pg_admin: str, pg_log: str | None, maria_admin: str, redis_admin: str) -> None:
        self.pg_admin, self.pg_log, self.maria_admin, self.redis_admin = pg_admin, pg_log, maria_admin, redis_admin
        self._pg_offset = 0
        self._monitor: subprocess.Popen[bytes] | None = None
        self._monitor_log: Any = None

    def start(self) -> None:
        if not self.pg_log or not os.path.exists(self.pg_log):
            pytest.fail("the bad-input suite reads PostgreSQL's statement log, so it needs the server the tests "
                        "start themselves (unset TWOPC_TEST_POSTGRES_URL)", pytrace=False)
        self._pg_offset = os.path.getsize(self.pg_log)
        eng = sa.create_engine(self.pg_admin, isolation_level="AUTOCOMMIT")
        with eng.connect() as c:
            c.exec_driver_sql("ALTER SYSTEM SET log_statement = 'all'")
            c.exec_driver_sql("SELECT pg_reload_conf()")
        eng.dispose()
        eng = sa.create_engine(self.maria_admin)
        with eng.begin() as c:
            c.exec_driver_sql("SET GLOBAL log_output = 'TABLE'")
            c.exec_driver_sql("TRUNCATE TABLE mysql.general_log")
            c.exec_driver_sql("SET GLOBAL general_log = 'ON'")
        eng.dispose()
        # Redis: every command the server receives, as MONITOR prints it, into a file (a
        # redis-cli process of its own: nothing in this process has to keep reading)
        self._monitor_log = tempfile.NamedTemporaryFile(prefix="twopc-monitor-", suffix=".log")  # noqa: SIM115 - closed in stop()
        self._monitor = subprocess.Popen([find_redis_cli(), "-u", self.redis_admin, "MONITOR"],
                                         stdout=self._monitor_log, stderr=subprocess.STDOUT)
        r = redis.Redis.from_url(self.redis_admin)
        try:  # MONITOR is on once it shows a command sent after it
            mark = f"twopc-monitor-{uid()}"
            for _ in range(200):
                r.echo(mark)
                if mark.encode() in Path(self._monitor_log.name).read_bytes():
                    break
                time.sleep(0.05)  # redis-cli is starting; polled, bounded
            else:
                pytest.fail("Redis MONITOR (redis-cli) showed no command", pytrace=False)
        finally:
            r.close()

    def stop(self) -> None:
        if self._monitor is not None:
            self._monitor.terminate()
            self._monitor.wait()
            self._monitor_log.close()
        eng = sa.create_engine(self.pg_admin, isolation_level="AUTOCOMMIT")
        with eng.connect() as c:
            c.exec_driver_sql("ALTER SYSTEM RESET log_statement")
            c.exec_driver_sql("SELECT pg_reload_conf()")
        eng.dispose()
        eng = sa.create_engine(self.maria_admin)
        with eng.begin() as c:
            c.exec_driver_sql("SET GLOBAL general_log = 'OFF'")
            c.exec_driver_sql("TRUNCATE TABLE mysql.general_log")
        eng.dispose()

    def text(self) -> dict[str, str]:
        """Each server's statement log so far (since :meth:`start`)."""
        assert self.pg_log is not None
        with open(self.pg_log, "rb") as f:
            f.seek(self._pg_offset)
            pg = f.read().decode("utf-8", "replace")
        eng = sa.create_engine(self.maria_admin)
        with eng.connect() as c:
            maria = "\n".join(str(r[0]) for r in c.exec_driver_sql("SELECT argument FROM mysql.general_log"))
        eng.dispose()
        monitor = Path(self._monitor_log.name).read_bytes().decode("utf-8", "replace") if self._monitor_log else ""
        return {"PostgreSQL log": pg, "MariaDB general log": maria, "Redis MONITOR output": monitor}


def checkpoint_problems(root: Path) -> list[str]:
    """Half-written or unreadable ledger records under *root* (temporary files, JSON that
    does not parse)."""
    out = []
    for p in root.rglob("*") if root.exists() else ():
        if not p.is_file():
            continue
        if p.name.endswith((".tmp", ".partial")) or p.name.startswith("."):
            if not p.name.endswith(".crc"):
                out.append(f"temporary file {p}")
            continue
        data = p.read_bytes()
        if data[:1] == b"{":
            try:
                json.loads(data)
            except ValueError:
                out.append(f"half-written record {p}")
    return out


def checkpoint_text(root: Path) -> Iterator[tuple[str, str]]:
    for p in root.rglob("*") if root.exists() else ():
        if p.is_file():
            yield str(p), p.read_bytes().decode("utf-8", "replace")
