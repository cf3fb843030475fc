"""Throwaway PostgreSQL cluster built from the local server binaries."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
from collections.abc import Mapping
from typing import Any

from ._errors import ServerUnavailable
from ._procutil import free_port
from ._server import LocalServer

_FIX = (
    "install the PostgreSQL server binaries (apt-get install postgresql) or point "
    "TWOPC_TEST_POSTGRES_URL at a server with max_prepared_transactions >= 64"
)


def find_pg_bindir(explicit: str | None = None) -> str:
    """Directory of ``initdb``/``postgres``/``pg_isready``/``psql``: *explicit*, ``$TWOPC_PG_BINDIR``, ``pg_config
    --bindir``, the highest ``/usr/lib/postgresql/*/bin``, ``initdb`` on ``PATH``; else ServerUnavailable."""
    candidates = [c for c in (explicit, os.environ.get("TWOPC_PG_BINDIR")) if c]
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            candidates.append(subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10,
                                             check=True).stdout.strip())
    def version(path: str) -> tuple[int, ...]:
        match = re.search(r"/postgresql/([0-9.]+)/bin$", path)
        return tuple(int(p) for p in match.group(1).split(".") if p) if match else ()
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True)
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(os.path.dirname(os.path.realpath(initdb)))
    for cand in candidates:
        if all(os.access(os.path.join(cand, b), os.X_OK) for b in ("initdb", "postgres")):
            return cand
    raise ServerUnavailable(f"no PostgreSQL server binaries found (looked in {candidates}); {_FIX}")


def _ensure_user(name: str) -> pwd.struct_passwd:
    """The passwd entry of *name*, creating a system user if needed (root only)."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(name)
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    proc = subprocess.run([useradd, "--system", "--no-create-home", "--user-group",
                          "--shell", "/usr/sbin/nologin", name], capture_output=True, text=True)
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise ServerUnavailable(f"PostgreSQL refuses to run as root and creating user {name!r} failed: "
                                f"{proc.stderr.strip() or proc.returncode}; create it by hand or {_FIX}") from None


class LocalPostgres(LocalServer):
    """A private PostgreSQL cluster in a temporary directory, for tests and demos.

    Listens on ``127.0.0.1:<port>`` (chosen at first start, kept across restarts) and a unix
    socket; role and database ``twopc`` (random password), superuser ``postgres`` (trust over the
    socket only). As root the binaries run as system user *run_as* (they refuse root). ``fsync=on``:
    prepared transactions survive :meth:`kill` + :meth:`restart`. :meth:`stop` removes everything;
    an ``atexit`` hook stops servers still running."""

    _stop_signal = signal.SIGINT  # fast shutdown
    _fix = _FIX

    def __init__(self, *, max_prepared_transactions: int = 64, max_connections: int = 100, port: int | None = None,
                 bindir: str | None = None, base_dir: str | None = None, run_as: str = "twopc-pg",
                 settings: Mapping[str, str] | None = None, startup_timeout_s: float = 60.0) -> None:
        super().__init__(port, base_dir, startup_timeout_s)
        self.max_prepared_transactions = max_prepared_transactions
        self.max_connections = max_connections
        self._bindir = bindir
        self._run_as = run_as
        self._settings = dict(settings or {})
        self.password = secrets.token_urlsafe(18)
        self.user = "twopc"
        self.database = "twopc"
        self._ids: dict[str, Any] = {}

    @property
    def url(self) -> str:
        """SQLAlchemy URL ``postgresql+psycopg://twopc:<pw>@127.0.0.1:<port>/twopc``."""
        return f"postgresql+psycopg://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    @property
    def dsn(self) -> str:
        """libpq/psycopg connection string for role ``twopc`` over TCP."""
        return f"host=127.0.0.1 port={self.port} user={self.user} password={self.password} dbname={self.database}"

    @property
    def admin_dsn(self) -> str:
        """psycopg connection string for superuser ``postgres`` over the unix socket."""
        return f"host={self._require_tmp()} port={self.port} user=postgres dbname={self.database}"

    def start(self) -> LocalPostgres:
        """Create the cluster on first call, start the server, wait until ready; ServerUnavailable (with
        the log tail) when that fails or times out."""
        if self.running:
            return self
        bindir = self._bindir = find_pg_bindir(self._bindir)
        if self._tmp is None:
            self._create_cluster(bindir)  # initdb, first launch, role/database
        else:
            self._launch(bindir)
        return self

    def _run(self, argv: list[str], what: str, *, stdin: str | None = None) -> None:
        proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=self._timeout, **self._ids)
        if proc.returncode != 0:
            raise ServerUnavailable(f"{what} failed (exit {proc.returncode}): {proc.stdout[-2000:]}"
                                    f"{proc.stderr[-2000:]}\n{_FIX}")

    def _create_cluster(self, bindir: str) -> None:
        tmp = self._make_tmp("twopc-pg-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env.update(HOME=tmp, LC_ALL="C", LANG="C")
        self._ids = {"env": env, "cwd": tmp}
        if os.geteuid() == 0:
            user = _ensure_user(self._run_as)
            os.chown(tmp, user.pw_uid, user.pw_gid)
            self._ids.update(user=user.pw_uid, group=user.pw_gid, extra_groups=[])
            parent = os.path.dirname(tmp)
            if not (os.stat(parent).st_mode & 0o001):
                raise ServerUnavailable(f"{parent} is not traversable by user {self._run_as!r}; "
                                        "pass base_dir= or set TMPDIR to a world-traversable directory")
        self._run([os.path.join(bindir, "initdb"), "-D", os.path.join(tmp, "data"),
                  "--username=postgres", "--auth-local=trust", "--auth-host=scram-sha-256",
                  "--encoding=UTF8", "--no-locale", "--no-sync"], "initdb")
        if self._port is None:
            self._port = free_port()
        settings = {"listen_addresses": "'127.0.0.1'", "port": str(self._port), "unix_socket_directories": f"'{tmp}'",
                    "max_prepared_transactions": str(self.max_prepared_transactions),
                    "max_connections": str(self.max_connections), "fsync": "on", "synchronous_commit": "on",
                    "full_page_writes": "on", "logging_collector": "off", "shared_buffers": "32MB"}
        settings.update(self._settings)
        with open(os.path.join(tmp, "data", "postgresql.conf"), "a", encoding="utf-8") as fh:
            fh.write("\n# twopc LocalPostgres\n")
            fh.writelines(f"{k} = {v}\n" for k, v in settings.items())
        self._launch(bindir)
        psql = [os.path.join(bindir, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
                "-h", tmp, "-p", str(self._port), "-U", "postgres", "-d", "postgres"]
        # The statements go in on stdin: a password on psql's command line would show in
        # every process listing.  psql runs each one in its own transaction, as with -c.
        self._run(psql, "creating role/database", stdin=(f"CREATE ROLE {self.user} LOGIN PASSWORD '{self.password}';\n"
                                                         f"CREATE DATABASE {self.database} OWNER {self.user};\n"))

    def _launch(self, bindir: str) -> None:
        tmp = self._require_tmp()
        proc = self._spawn([os.path.join(bindir, "postgres"), "-D", os.path.join(tmp, "data")], **self._ids)
        isready = [os.path.join(bindir, "pg_isready"), "-q", "-h", tmp, "-p", str(self._port),
                   "-U", "postgres", "-d", "postgres", "-t", "2"]
        def ready() -> bool:
            return (subprocess.run(isready, capture_output=True, env=self._ids.get("env")).returncode == 0
                    and self._pid_in(os.path.join(self.data_dir, "postmaster.pid")) == proc.pid)
        self._wait_until(ready, "postgres")

    def crash(self) -> None:
        """Immediate shutdown (``pg_ctl stop -m immediate``): nothing checkpointed, the next start runs
        crash recovery; SIGKILL if it does not go within 10 s."""
        self._end(signal.SIGQUIT, 10.0)
