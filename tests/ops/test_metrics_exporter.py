"""``twopc metrics``: the exporter that serves a checkpoint's in-doubt gauges from a process of
its own, so the in-doubt alert fires while the query (and with it its ``metricsPort`` server)
is down. Shown after a real crash: a streaming query into PostgreSQL SIGKILLed right after it
recorded batch 0's decision."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from twopc import CommitLedger, register_metrics
from twopc.operations._metrics import CHECKPOINT_GAUGES
from twopc.testing import SinkHarness

from tests._kit_harnesses import harness_for
from tests._ops_helpers import REPO, cli_env, crash_query_once, twopc_cli

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _series(text: str) -> Series:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _connects(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2.0)
        return s.connect_ex((host, port)) == 0


@pytest.fixture
def killed_in_doubt(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[SinkHarness, Path]]:
    """A real streaming query into twopc-postgres, SIGKILLed (driver, JVM, Python workers)
    right after it recorded batch 0's decision: its two prepared transactions are in doubt."""
    with harness_for("postgres", request, tmp_path) as harness:
        ck = crash_query_once(harness, tmp_path / "job", "after_decision@batch=0:crash", ids=list(range(12)),
                              partitions=2)
        try:
            yield harness, ck
        finally:  # the prepared transactions hold the table's locks until someone finishes them
            done = twopc_cli("recover", "--checkpoint", str(ck), options=harness.sink_options())
            assert done.returncode == 0, done.stderr


def _exporter(*args: str) -> subprocess.Popen[str]:
    script = shutil.which("twopc", path=os.path.dirname(sys.executable))
    assert script is not None, "the twopc console script is not installed: run make venv"
    return subprocess.Popen([script, "metrics", *args], cwd=REPO, env=cli_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_twopc_metrics_serves_the_in_doubt_batch_of_a_killed_query(
        killed_in_doubt: tuple[SinkHarness, Path], tmp_path: Path) -> None:
    harness, ck = killed_in_doubt
    decision = CommitLedger(str(ck)).decision(0)
    assert decision is not None and len(decision.handles) == 2
    port = _free_port()
    server = _exporter("--checkpoint", str(ck), "--port", str(port))
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        assert line.startswith(f"serving 1 checkpoint(s) on http://127.0.0.1:{port}/metrics"), \
            line + server.communicate(timeout=30)[1]
        scraped = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
        loopback_only = not _connects("127.0.0.2", port)
    finally:
        server.kill()
        server.wait()
    once = twopc_cli("metrics", "--checkpoint", str(ck), "--textfile", str(tmp_path / "twopc.prom"), "--once")
    assert once.returncode == 0, once.stderr
    written = (tmp_path / "twopc.prom").read_text()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("twopc.prom")] == ["twopc.prom"]

    sink_id = CommitLedger(str(ck)).recorded_sink_id()
    labels = (("format", "twopc-postgres"), ("sink_id", str(sink_id)))  # from the checkpoint's target record
    for text in (scraped, written):
        got = _series(text)
        assert got[("twopc_in_doubt_transactions", labels)] == 2, text
        assert got[("twopc_oldest_in_doubt_seconds", labels)] > 0, text
        assert {name for name, _ in got} == {f"twopc_{n}" for n in CHECKPOINT_GAUGES} - {
            "twopc_last_commit_timestamp_seconds"}, text  # nothing committed yet; no counter served twice
    assert loopback_only, "twopc metrics listens beyond 127.0.0.1 without --host"

    registry = CollectorRegistry()  # what the query's own metricsPort server serves for the same checkpoint
    register_metrics(registry, str(ck))
    driver = _series(generate_latest(registry).decode())
    assert {k for k in driver if k[0] in ("twopc_in_doubt_transactions", "twopc_oldest_in_doubt_seconds",
                                          "twopc_batch_failed_attempts")} == {k for k in _series(scraped)}

    sink = harness.new_sink()
    try:  # still prepared: the exporter changed nothing
        assert {h.txn_id for h in sink.list_prepared(str(sink_id))} == decision.txn_ids
    finally:
        sink.close()


def test_twopc_metrics_refuses_what_it_cannot_serve(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    CommitLedger(str(ck)).bind_sink_id(None, default="job1")
    cases = [
        (["--checkpoint", str(ck)], 2, "give --port N (serve over HTTP) and/or --textfile PATH.prom"),
        (["--checkpoint", str(ck), "--textfile", str(tmp_path / "twopc.txt")], 2,
         f"name it {tmp_path / 'twopc.txt'}.prom"),
        (["--checkpoint", str(ck), "--port", str(_free_port()), "--once"], 2, "give --textfile without --port"),
        (["--checkpoint", str(tmp_path / "typo"), "--textfile", str(tmp_path / "t.prom"), "--once"], 3,
         f"there is no twopc checkpoint at {tmp_path / 'typo'}"),
    ]
    for args, code, message in cases:
        out = twopc_cli("metrics", *args)
        assert (out.returncode, message in out.stderr) == (code, True), (args, out.stderr)
    assert not (tmp_path / "t.prom").exists() and not (tmp_path / "typo").exists()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = twopc_cli("metrics", "--checkpoint", str(ck), "--port", str(port))
    assert out.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in out.stderr, out.stderr
