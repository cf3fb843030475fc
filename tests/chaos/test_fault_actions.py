"""Fault plans' remote actions: ``proxy`` and ``server`` rules fire in one process (here a
plain subprocess, in the chaos suite a job's driver or worker) and the FaultControl of the
process that owns the proxy or server performs them. Each server action is tested on a real
server of its own (they are crashed): PostgreSQL's immediate shutdown and restart keeps a
prepared transaction, MariaDB's SIGKILL and restart keeps a prepared XA transaction, Redis's
SIGKILL and restart replays its AOF."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pymysql
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from twopc.faultinject import (
    ENV_CONTROL,
    FaultControl,
    FaultControlError,
    FaultPlan,
    FaultProxy,
    FaultRule,
    FaultSpecError,
    LocalMariaDB,
    LocalPostgres,
    LocalRedis,
)


def _client(port: int) -> redis.Redis:
    """A client that gives up on a reply after half a second and never retries."""
    return redis.Redis(port=port, socket_timeout=0.5, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))


def _fire(plan: str, tmp_path: Path, control: FaultControl | None) -> subprocess.CompletedProcess[str]:
    """Hit fault point ``probe`` (batch 0) in a fresh interpreter armed with *plan*."""
    env = {k: v for k, v in os.environ.items() if k != ENV_CONTROL}
    env.update(FaultPlan.parse(plan).env(tmp_path / "faults"))
    if control is not None:
        env.update(control.env())
    code = "from twopc import faultinject; faultinject.fault_point('probe', batch_id=0); print('went on')"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


# -- the grammar ---------------------------------------------------------------------------

def test_the_database_dies_right_after_the_decision_is_one_line() -> None:
    plan = FaultPlan.parse("after_decision:server/postgres/crash")
    assert plan.rules == (FaultRule("after_decision", action="server", target="postgres", fault="crash"),)
    assert plan.rules[0].kind == "server.crash"


def test_remote_rules_round_trip_inline_and_json() -> None:
    text = ("during_invoke@batch=1@partition=0:proxy/pg/blackhole/for=2s/direction=upstream,"
            "after_pre_commit:proxy/my/swallow_reply/for=1.5s/pattern=XA COMMIT*2,"
            "before_decision:proxy/r/latency/for=3s/delay=200ms,after_decision:server/redis/down/for=1s,"
            "after_commit:proxy/pg/reset,after_mark:server/my/restart")
    plan = FaultPlan.parse(text)
    assert FaultPlan.parse(plan.to_spec()) == plan
    assert FaultPlan.from_json(plan.to_json()) == plan
    assert plan.rules[2].delay_s == 0.2 and plan.rules[0].for_s == 2.0
    issue = {"point": "after_decision", "action": "proxy", "fault": "blackhole", "target": "postgres", "for": "5s"}
    rule = FaultPlan.from_json(json.dumps({"rules": [issue]})).rules[0]
    assert (rule.target, rule.fault, rule.for_s) == ("postgres", "blackhole", 5.0)


@pytest.mark.parametrize(("spec", "message"), [
    ("a:proxy", "needs '/TARGET/FAULT'"),
    ("a:proxy/pg/explode", "fault must be one of reset|blackhole|latency|swallow_reply|heal"),
    ("a:server/pg/unplug", "fault must be one of crash|restart|down"),
    ("a:crash/pg", "takes no '/...' part"),
    ("a:server/pg/crash/for=2s", "crash takes no for"),
    ("a:proxy/pg/swallow_reply", "swallow_reply needs a pattern"),
    ("a:proxy/pg/blackhole/for=soon", "is not a duration"),
    ("a:proxy/pg/blackhole/when=now", "bad parameter 'when=now'"),
    ("a:proxy/pg/latency/direction=sideways", "direction must be upstream, downstream or both"),
])
def test_bad_remote_rules_are_named(spec: str, message: str) -> None:
    with pytest.raises(FaultSpecError, match=message.replace("|", r"\|").replace("(", r"\(")):
        FaultPlan.parse(spec)


def test_remote_fields_only_go_with_remote_actions() -> None:
    with pytest.raises(FaultSpecError, match="fault, target only go with the proxy and server actions"):
        FaultRule("a", action="crash", target="pg", fault="crash")


# -- the control channel -------------------------------------------------------------------

def test_a_rule_without_a_control_channel_fails_loudly(tmp_path: Path) -> None:
    proc = _fire("probe:proxy/pg/reset", tmp_path, None)
    assert proc.returncode != 0 and "went on" not in proc.stdout
    assert "FaultControlError" in proc.stderr and "TWOPC_FAULT_CONTROL is not set" in proc.stderr


def test_an_unknown_target_is_answered_as_an_error(tmp_path: Path) -> None:
    with FaultControl() as control:
        proc = _fire("probe:server/nowhere/crash", tmp_path, control)
        assert proc.returncode != 0 and "no server named 'nowhere'" in proc.stderr
        assert control.errors and not control.fired


@pytest.fixture(scope="module")
def redis_server() -> Iterator[LocalRedis]:
    with LocalRedis(appendfsync="always") as server:
        yield server


def test_a_proxy_rule_fired_in_another_process_stalls_then_resets(redis_server: LocalRedis, tmp_path: Path) -> None:
    with FaultProxy("127.0.0.1", redis_server.port) as proxy, FaultControl() as control:
        control.add_proxy("redis", proxy)
        client = _client(proxy.port)
        assert client.ping()
        proc = _fire("probe:proxy/redis/blackhole/for=30s", tmp_path, control)
        assert proc.returncode == 0 and "went on" in proc.stdout, proc.stderr
        assert control.fired["proxy.blackhole"] == 1
        with pytest.raises(redis.TimeoutError):
            client.ping()  # the stall is in force when the firing process goes on
        control.settle()  # ends it: healed, connections reset
        assert redis.Redis(port=proxy.port, socket_timeout=5).ping()


def test_a_swallowed_reply_rule_loses_the_reply(redis_server: LocalRedis, tmp_path: Path) -> None:
    with FaultProxy("127.0.0.1", redis_server.port) as proxy, FaultControl() as control:
        control.add_proxy("redis", proxy)
        proc = _fire("probe:proxy/redis/swallow_reply/pattern=lost-value/for=30s", tmp_path, control)
        assert proc.returncode == 0, proc.stderr
        client = _client(proxy.port)
        with pytest.raises(redis.TimeoutError):
            client.set("twopc-swallowed", "lost-value")
        assert proxy.swallowed == 1
        assert redis.Redis(port=redis_server.port).get("twopc-swallowed") == b"lost-value"  # applied, unanswered
        control.settle()


# -- server actions ------------------------------------------------------------------------

def test_redis_killed_and_restarted_from_its_aof(redis_server: LocalRedis, tmp_path: Path) -> None:
    client = redis.Redis(port=redis_server.port)
    client.set("twopc-durable", "kept")
    pid = redis_server._proc.pid if redis_server._proc else None
    with FaultControl() as control:
        control.add_server("redis", redis_server)
        proc = _fire("probe:server/redis/crash", tmp_path, control)
        assert proc.returncode == 0, proc.stderr
        assert control.fired["server.crash"] == 1
    assert redis_server.running and redis_server._proc is not None and redis_server._proc.pid != pid
    assert redis.Redis(port=redis_server.port).get("twopc-durable") == b"kept"


def test_a_server_down_for_a_while_comes_back(redis_server: LocalRedis, tmp_path: Path) -> None:
    with FaultControl() as control:
        control.add_server("redis", redis_server)
        proc = _fire("probe:server/redis/down/for=60s", tmp_path, control)
        assert proc.returncode == 0, proc.stderr
        assert not redis_server.running  # answered at once, the server still down
        control.settle()
        assert redis_server.running and redis.Redis(port=redis_server.port).ping()


def test_postgres_immediate_shutdown_keeps_a_prepared_transaction(tmp_path: Path) -> None:
    with LocalPostgres(max_prepared_transactions=8) as server, FaultControl() as control:
        control.add_server("postgres", server)
        with psycopg.connect(server.dsn, autocommit=True) as c:
            c.execute("CREATE TABLE t (id int)")
            c.execute("BEGIN")
            c.execute("INSERT INTO t VALUES (1)")
            c.execute("PREPARE TRANSACTION 'twopc-survivor'")
        pid = server.pid
        proc = _fire("probe:server/postgres/crash", tmp_path, control)
        assert proc.returncode == 0, proc.stderr
        assert server.pid not in (None, pid)
        assert "immediate shutdown request" in Path(server.log_path).read_text(errors="replace")
        with psycopg.connect(server.dsn, autocommit=True) as c:
            assert c.execute("SELECT gid FROM pg_prepared_xacts").fetchall() == [("twopc-survivor",)]
            c.execute("COMMIT PREPARED 'twopc-survivor'")
            assert c.execute("SELECT id FROM t").fetchall() == [(1,)]
        proc = _fire("probe:server/postgres/restart", tmp_path / "again", control)
        assert proc.returncode == 0 and control.fired["server.restart"] == 1, proc.stderr


def test_mariadb_sigkill_keeps_a_prepared_xa_transaction(tmp_path: Path) -> None:
    with LocalMariaDB() as server, FaultControl() as control:
        control.add_server("mariadb", server)

        def connect() -> pymysql.connections.Connection:
            return pymysql.connect(host="127.0.0.1", port=server.port, user=server.user, password=server.password,
                                   database=server.database, autocommit=True)

        with connect() as c, c.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT) ENGINE=InnoDB")
            cur.execute("XA START 'twopc-survivor'")
            cur.execute("INSERT INTO t VALUES (1)")
            cur.execute("XA END 'twopc-survivor'")
            cur.execute("XA PREPARE 'twopc-survivor'")
        pid = server.pid
        proc = _fire("probe:server/mariadb/crash", tmp_path, control)
        assert proc.returncode == 0, proc.stderr
        assert server.pid not in (None, pid)
        with connect() as c, c.cursor() as cur:
            cur.execute("XA RECOVER")
            assert [r[3] for r in cur.fetchall()] == [b"twopc-survivor"]
            cur.execute("XA COMMIT 'twopc-survivor'")
            cur.execute("SELECT id FROM t")
            assert cur.fetchall() == ((1,),)


def test_control_errors_name_the_rule() -> None:
    rule = FaultPlan.parse("probe:server/pg/crash").rules[0]
    from twopc.faultinject._control import request_remote_fault

    old = os.environ.pop(ENV_CONTROL, None)
    try:
        with pytest.raises(FaultControlError, match=r"fault rule 'probe:server/pg/crash\*1' fired"):
            request_remote_fault(rule, "line")
    finally:
        if old is not None:
            os.environ[ENV_CONTROL] = old
