"""Throwaway MariaDB server built from the local ``mariadbd`` binaries."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import Mapping

from ._errors import ServerUnavailable
from ._procutil import first_executable, free_port
from ._server import LocalServer

_FIX = (
    "run `make mariadb` (or `apt-get install -y --no-install-recommends mariadb-server`), "
    "or point TWOPC_TEST_MARIADB_URL at a MariaDB/MySQL server with InnoDB and XA "
    "(mysql+pymysql://user:pw@host:port/db)"
)


def find_mariadbd(explicit: str | None = None) -> str:
    """Path of ``mariadbd``: *explicit*, ``$TWOPC_MARIADBD``, ``PATH``, then ``/usr/sbin``,
    ``/usr/local/sbin``, ``/usr/local/bin``; ServerUnavailable (saying how to install it) if none."""
    found = first_executable([explicit, os.environ.get("TWOPC_MARIADBD"), shutil.which("mariadbd"),
                              "/usr/sbin/mariadbd", "/usr/local/sbin/mariadbd", "/usr/local/bin/mariadbd",
                              "/usr/local/mysql/bin/mariadbd"])
    if found is None:
        raise ServerUnavailable(f"mariadbd (the MariaDB server) not found; {_FIX}")
    return found


def find_mariadb_install_db(explicit: str | None = None, *, server: str | None = None) -> str:
    """Path of ``mariadb-install-db``: *explicit*, ``$TWOPC_MARIADB_INSTALL_DB``, ``PATH`` (also as
    ``mysql_install_db``), the server's folder and sibling ``bin``, ``/usr/bin``; else ServerUnavailable."""
    dirs: list[str] = []
    if server:
        d = os.path.dirname(os.path.realpath(server))
        dirs += [d, os.path.join(os.path.dirname(d), "bin"), os.path.join(os.path.dirname(d), "scripts")]
    dirs += ["/usr/bin", "/usr/local/bin", "/usr/local/mysql/scripts"]
    found = first_executable(
        [explicit, os.environ.get("TWOPC_MARIADB_INSTALL_DB"), shutil.which("mariadb-install-db"),
         shutil.which("mysql_install_db")]
        + [os.path.join(d, n) for d in dirs for n in ("mariadb-install-db", "mysql_install_db")]
    )
    if found is None:
        raise ServerUnavailable(f"mariadb-install-db not found (it comes with mariadbd); {_FIX}")
    return found


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


def _greeting(port: int) -> str | None:
    """Server version from the MySQL handshake on ``127.0.0.1:port``, or None when nothing valid answers."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock, sock.makefile("rb") as f:
            header = f.read(4)
            payload = f.read(min(int.from_bytes(header[:3], "little"), 256)) if len(header) == 4 else b""
    except OSError:
        return None
    if not payload or payload[0] != 10:  # protocol version 10; 0xff is an error packet
        return None
    version, found, _ = payload[1:].partition(b"\x00")
    # "5.5.5-": MariaDB's prefix for old replication clients
    return (version.decode("ascii", "replace").removeprefix("5.5.5-") if found else "") or None


class LocalMariaDB(LocalServer):
    """A private MariaDB server in a temporary directory, for tests and demos.

    Run as ``mariadbd --no-defaults`` (``--user=root`` as root) on ``127.0.0.1:<port>`` (chosen at
    first start, kept across restarts) and a unix socket. Logins are checked: ``twopc``
    (:attr:`password`) has all privileges on ``twopc`` and ``twopc_*`` databases, ``PROCESS`` (the
    XA sink reads ``INNODB_TRX``) and ``XA_RECOVER_ADMIN`` where it exists; ``twopc_admin``
    (:attr:`admin_url`) has every privilege.

    ``innodb_flush_log_at_trx_commit=1``: prepared XA transactions survive :meth:`kill` +
    :meth:`restart` (``XA RECOVER`` lists them). :meth:`stop` removes everything; an ``atexit``
    hook stops servers still running."""

    _fix = _FIX

    def __init__(self, *, port: int | None = None, binary: str | None = None, install_db: str | None = None,
                 base_dir: str | None = None, buffer_pool_size: str = "32M", max_connections: int = 200,
                 settings: Mapping[str, str] | None = None, startup_timeout_s: float = 60.0) -> None:
        super().__init__(port, base_dir, startup_timeout_s)
        self._binary = binary
        self._install_db = install_db
        self.buffer_pool_size = buffer_pool_size
        self.max_connections = max_connections
        self._settings = dict(settings or {})
        self.user = "twopc"
        self.password = secrets.token_urlsafe(18)
        self.database = "twopc"
        self.admin_user = "twopc_admin"
        self.admin_password = secrets.token_urlsafe(18)
        self.version: str | None = None
        """Server version from the handshake (e.g. ``10.11.6-MariaDB-0+deb12u1``), once started."""

    @property
    def url(self) -> str:
        """SQLAlchemy URL ``mysql+pymysql://twopc:<pw>@127.0.0.1:<port>/twopc``."""
        return f"mysql+pymysql://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    @property
    def admin_url(self) -> str:
        """SQLAlchemy URL of the all-privileges account ``twopc_admin``."""
        return f"mysql+pymysql://{self.admin_user}:{self.admin_password}@127.0.0.1:{self.port}/{self.database}"

    @property
    def socket_path(self) -> str:
        return os.path.join(self._require_tmp(), "mysqld.sock")

    def start(self) -> LocalMariaDB:
        """Create the data directory and accounts on first call, start the server and wait until it
        answers; ServerUnavailable (with the log tail and the fix) when that fails or times out."""
        if self.running:
            return self
        binary = self._binary = find_mariadbd(self._binary)
        if self._tmp is None:
            self._install(binary)
        self._launch(binary)
        return self

    def _common_args(self) -> list[str]:
        args = [f"--datadir={self.data_dir}", f"--innodb-buffer-pool-size={self.buffer_pool_size}",
                "--innodb-log-file-size=16M", "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_unicode_ci", "--skip-name-resolve"]
        if os.geteuid() == 0:
            args.append("--user=root")  # mariadbd refuses to run as root without it
        return args

    def _bootstrap_sql(self) -> str:
        user, pw = _sql_string(self.user), _sql_string(self.password)
        admin, apw = _sql_string(self.admin_user), _sql_string(self.admin_password)
        db = self.database.replace("`", "``")
        lines = [
            "FLUSH PRIVILEGES;",  # bootstrap runs without grant tables until this
            f"CREATE DATABASE IF NOT EXISTS `{db}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;",
        ]
        for host in ("%", "127.0.0.1", "localhost"):
            h = _sql_string(host)
            lines += [
                f"CREATE USER {user}@{h} IDENTIFIED BY {pw};",
                f"GRANT ALL PRIVILEGES ON `{db}`.* TO {user}@{h};",
                f"GRANT ALL PRIVILEGES ON `{db}\\_%`.* TO {user}@{h};",
                # the XA sink reads INNODB_TRX to see a prepared transaction detach (README)
                f"GRANT PROCESS ON *.* TO {user}@{h};",
                # MySQL 8 needs XA_RECOVER_ADMIN for XA RECOVER; MariaDB has no such privilege
                # (the GRANT fails to parse there, which the handler swallows).
                ("BEGIN NOT ATOMIC DECLARE CONTINUE HANDLER FOR SQLEXCEPTION BEGIN END; "
                 f"EXECUTE IMMEDIATE {_sql_string(f'GRANT XA_RECOVER_ADMIN ON *.* TO {user}@{h}')}; END;"),
                f"CREATE USER {admin}@{h} IDENTIFIED BY {apw};",
                f"GRANT ALL PRIVILEGES ON *.* TO {admin}@{h} WITH GRANT OPTION;",
            ]
        return "\n".join(lines) + "\n"

    def _install(self, binary: str) -> None:
        install_db = self._install_db = find_mariadb_install_db(self._install_db, server=binary)
        tmp = self._make_tmp("twopc-mariadb-")
        if len(os.path.join(tmp, "mysqld.sock")) > 100:
            raise ServerUnavailable(f"temporary folder {tmp} is too long for a unix socket path; "
                                    f"pass base_dir= or set TMPDIR to a short path")
        extra = os.path.join(tmp, "bootstrap.sql")
        fd = os.open(extra, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(self._bootstrap_sql())
        argv = [install_db, "--no-defaults", *self._common_args(),
                "--auth-root-authentication-method=socket", "--skip-test-db",
                f"--extra-file={extra}"]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self._timeout, cwd=tmp,
                                  env={**os.environ, "LC_ALL": "C", "LANG": "C"})
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServerUnavailable(f"mariadb-install-db failed: {exc}\n{_FIX}") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(extra)  # it holds the passwords
        if proc.returncode != 0:
            out = (proc.stdout + proc.stderr).replace(self.password, "***").replace(self.admin_password, "***")
            raise ServerUnavailable(f"mariadb-install-db failed (exit {proc.returncode}): {out[-3000:]}\n{_FIX}")
        if self._port is None:
            self._port = free_port()

    def _launch(self, binary: str) -> None:
        tmp = self._require_tmp()
        pid_file = os.path.join(tmp, "mysqld.pid")
        with contextlib.suppress(OSError):
            os.unlink(pid_file)
        options = {"port": str(self.port), "bind-address": "127.0.0.1", "socket": self.socket_path,
                   "pid-file": pid_file, "log-error": self.log_path, "tmpdir": tmp,
                   "max-connections": str(self.max_connections), "innodb-flush-log-at-trx-commit": "1",
                   "innodb-doublewrite": "1", "max-allowed-packet": "64M",
                   "max-connect-errors": "1000000",  # readiness probes close without logging in
                   **self._settings}
        argv = [binary, "--no-defaults", *self._common_args(), *(f"--{k}={v}" for k, v in options.items())]
        proc = self._spawn(argv, cwd=tmp)
        def ready() -> bool:
            version = _greeting(self.port) if self._pid_in(pid_file) == proc.pid else None
            self.version = version or self.version
            return version is not None
        self._wait_until(ready, "mariadbd")
