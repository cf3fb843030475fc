"""The randomized chaos suite's world: its own PostgreSQL, MariaDB and Redis (it crashes and
restarts them, so never the session's shared servers), a FaultProxy in front of each, one
FaultControl owning them all, and a harness per sink (a SQL sink's table has a primary key on
the row id, as users' tables do) whose options go through the proxy
(with a 5 s socket timeout, so a lost reply ends the statement instead of waiting for
keepalive) while the model check reads the target directly.

Environment knobs (what ``make chaos`` sets): ``TWOPC_CHAOS_SEED`` (default: from the
clock, printed), ``TWOPC_CHAOS_N`` (schedules, default 30), ``TWOPC_CHAOS_SINKS``
(comma-separated, default all six), ``TWOPC_CHAOS_BROKEN`` (``coordinator``: the job
commits before recording the decision; ``sink``: the file sink's abort ignores prepared
state), ``TWOPC_CHAOS_REPORT`` (the table's file, rewritten after every schedule),
``TWOPC_CHAOS_SHRINK`` (``0``: do not shrink a failure), ``TWOPC_CHAOS_MINUTES`` (stop
starting schedules after this long; the table says how many ran).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from twopc.faultinject import FaultControl, FaultProxy, LocalMariaDB, LocalPostgres, LocalRedis
from twopc.testing import ScheduleTarget, SinkHarness

from . import _broken_sinks as broken
from ._http_service import HttpService
from ._kit_harnesses import (
    OwnHarness,
    file_harness,
    jdbc_harness,
    mysql_xa_harness,
    postgres_harness,
    redis_harness,
    service_harness,
)

__all__ = ["HTTP_POINTS", "TARGETS", "ChaosEnv", "Knobs", "chaos_env"]

#: twopc-http's own fault points (declared by twopc.sinks.http), drawn for its schedules too.
HTTP_POINTS = ("http_before_ack", "http_before_delivered")

#: The sinks of the randomized suite, with their server's name in the FaultControl and the
#: request whose reply a swallow_reply loses (the commit).
TARGETS = {
    "postgres": ScheduleTarget("postgres", "postgres", "COMMIT PREPARED"),
    "mysql_xa": ScheduleTarget("mysql_xa", "mariadb", "XA COMMIT"),
    "staging_postgres": ScheduleTarget("staging_postgres", "postgres", "COMMIT"),
    "redis": ScheduleTarget("redis", "redis", "twopc_redis_v1_commit"),
    "file": ScheduleTarget("file"),
    "http": ScheduleTarget("http", "http", "Idempotency", points=HTTP_POINTS),
}

_SERVERS = {"postgres": "postgres", "staging_postgres": "postgres", "mysql_xa": "mariadb", "redis": "redis",
            "http": "http"}
_TIMEOUTS = {"socketTimeout": "5s", "connectTimeout": "5s"}
_SQL_TIMEOUTS = {**_TIMEOUTS, "socketTimeout": "8s", "lockTimeout": "3s"}
#: twopc-http: a lost reply ends its wait after 2 s, and is retried (with its key) quickly.
_HTTP_TIMEOUTS = {"timeout": "2s", "connectTimeout": "2s", "retryBackoff": "50ms", "retryBackoffMax": "500ms",
                  "maxRetries": "8"}


@dataclass
class Knobs:
    seed: int
    n: int
    sinks: list[str]
    broken: str
    report: str
    shrink: bool
    minutes: float = 0.0

    @classmethod
    def from_env(cls) -> Knobs:
        seed = int(os.environ.get("TWOPC_CHAOS_SEED") or int(time.time()) % 1_000_000)
        sinks = [s for s in (os.environ.get("TWOPC_CHAOS_SINKS") or ",".join(TARGETS)).split(",") if s]
        unknown = set(sinks) - set(TARGETS)
        if unknown:
            raise ValueError(f"TWOPC_CHAOS_SINKS: unknown sink(s) {sorted(unknown)}; known: {', '.join(TARGETS)}")
        broken_what = os.environ.get("TWOPC_CHAOS_BROKEN", "")
        if broken_what not in ("", "coordinator", "sink"):
            raise ValueError(f"TWOPC_CHAOS_BROKEN={broken_what!r}: use coordinator or sink")
        report = os.environ.get("TWOPC_CHAOS_REPORT") or os.path.join(tempfile.gettempdir(),
                                                                     f"twopc-chaos-{seed}.txt")
        return cls(seed, int(os.environ.get("TWOPC_CHAOS_N") or 30), sinks, broken_what, report,
                   os.environ.get("TWOPC_CHAOS_SHRINK", "1") != "0", float(os.environ.get("TWOPC_CHAOS_MINUTES") or 0))

    def reproduce(self, seed: int) -> str:
        """The one command that runs the schedule of *seed* again."""
        extra = "" if self.sinks == list(TARGETS) else f" SINKS={','.join(self.sinks)}"
        extra += f" BROKEN={self.broken}" if self.broken else ""
        return f"make chaos SEED={seed} N=1{extra}"


@dataclass
class ChaosEnv:
    control: FaultControl
    harnesses: dict[str, SinkHarness] = field(default_factory=dict)
    targets: list[ScheduleTarget] = field(default_factory=list)
    http: HttpService | None = None
    """twopc-http's reference service, whose log the model check reads too."""

    def settle(self) -> None:
        """Every fault over, every server up, and the model check's own pooled connections
        (killed with their server) dropped."""
        self.control.settle()
        for harness in self.harnesses.values():
            if isinstance(harness, OwnHarness) and harness.engine is not None:
                harness.engine.dispose()


def _through(harness: SinkHarness, server_port: int, proxy_port: int) -> SinkHarness:
    """*harness* with its sink's options pointed at the proxy, and bounded socket waits."""
    options = {k: v.replace(f"127.0.0.1:{server_port}", f"127.0.0.1:{proxy_port}") for k, v in harness.options.items()}
    timeouts = (_TIMEOUTS if options["url"].startswith("redis") else _HTTP_TIMEOUTS if options["url"].startswith("http")
                else _SQL_TIMEOUTS)
    return dataclasses.replace(harness, options={**options, **timeouts})


def _harness(sink: str, url: str) -> contextlib.AbstractContextManager[SinkHarness]:
    """The harness of *sink* on the server at *url*; a SQL table has a primary key on ``id``."""
    if sink == "postgres":
        return postgres_harness(url, keyed=True)
    if sink == "mysql_xa":
        return mysql_xa_harness(url, keyed=True)
    if sink == "staging_postgres":
        return jdbc_harness(url, "postgresql", "staging", keyed=True)
    return redis_harness(url)


@contextlib.contextmanager
def chaos_env(knobs: Knobs, tmp: Path) -> Iterator[ChaosEnv]:
    """Start what *knobs*' sinks need and yield the world; stop everything afterwards."""
    with contextlib.ExitStack() as stack:
        control = stack.enter_context(FaultControl())
        env = ChaosEnv(control, targets=[TARGETS[s] for s in knobs.sinks])
        needed = {_SERVERS[s] for s in knobs.sinks if s in _SERVERS}
        made: dict[str, Callable[[], LocalPostgres | LocalMariaDB | LocalRedis | HttpService]] = {
            "postgres": lambda: LocalPostgres(max_prepared_transactions=64), "mariadb": LocalMariaDB,
            "redis": lambda: LocalRedis(appendfsync="always"), "http": HttpService}
        servers = {name: made[name]() for name in sorted(needed)}
        proxies: dict[str, FaultProxy] = {}
        for name, server in servers.items():
            stack.enter_context(server)
            proxies[name] = stack.enter_context(FaultProxy("127.0.0.1", server.port))
            control.add_server(name, server).add_proxy(name, proxies[name])
        for sink in knobs.sinks:
            if sink == "file":
                if knobs.broken == "sink":
                    env.harnesses[sink] = broken.harness_on(broken.AbortIgnoresPreparedState, tmp / "file-out")
                else:
                    env.harnesses[sink] = stack.enter_context(file_harness(tmp / "file"))
                continue
            name = _SERVERS[sink]
            if sink == "http":
                service = servers[name]
                assert isinstance(service, HttpService)
                env.http = service
                env.harnesses[sink] = _through(service_harness(service, tmp / "http-outbox"), service.port,
                                               proxies[name].port)
                continue
            env.harnesses[sink] = _through(stack.enter_context(_harness(sink, servers[name].url)),
                                           servers[name].port, proxies[name].port)
        yield env
