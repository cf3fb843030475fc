"""The alert rules and the Grafana dashboard in ``monitoring/``, checked against what twopc
exports and run by Prometheus's own ``promtool`` (``make promtool`` installs it; a missing
promtool fails these tests).

The metric names come from the collector itself (:class:`twopc.operations._metrics.MetricsCollector` on
a checkpoint where every family has a sample), never from a list kept here. The alerts are
tested twice: ``monitoring/twopc-alerts.test.yml`` (scenarios written by hand, whose series
are checked against the collector's), and a promtool test built here from the scrapes of a
real PostgreSQL sink through a healthy commit, a driver killed after its decision, a
recovery, other users' prepared transactions filling the server, and a lost transaction."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from twopc import (
    CommitCoordinator,
    CommitLedger,
    RecoveryCoordinator,
    TransactionContext,
    TransactionLostError,
    register_metrics,
)
from twopc._inspect import Headroom
from twopc.faultinject import LocalPostgres
from twopc.operations._metrics import record_batch
from twopc.operations._metrics_export import MetricsCollector
from twopc.sinks import PostgresSink
from twopc.sinks.sql import dispose_engines
from twopc.spark._writer import WriterCore
from twopc.spi.runtime import RuntimeOptions, TwoPCCommitMessage, dumps_handle

from tests._filesink_helpers import crash_commit
from tests._ops_helpers import REPO

MONITORING = REPO / "monitoring"
RULES = MONITORING / "twopc-alerts.yml"
RULES_TEST = MONITORING / "twopc-alerts.test.yml"
DASHBOARD = MONITORING / "twopc-dashboard.json"
#: Labels Prometheus adds to every scraped series.
TARGET_LABELS = frozenset({"instance", "job"})

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = shutil.which("promtool")
    assert path is not None, ("promtool is not installed: run `make promtool` (Debian: apt-get install "
                              "prometheus), which `make test` runs first")
    return subprocess.run([path, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, frozenset[str]]:
    """Every series name twopc's collector exports, with its label names, read from the
    collector on a checkpoint where every family it defines has a sample."""
    ck = str(tmp_path_factory.mktemp("names") / "ck")
    ledger = CommitLedger(ck)
    ledger.bind_sink_id(None, default="names")
    record_batch(ledger, sink_id="names", format_name="twopc-postgres", action="committed", committed=1,
                 already_committed=0, aborted=0, swept=0, seconds=0.01, rows=1, first_prepared_at=time.time(),
                 headroom=Headroom("max_prepared_transactions", 1, 64))
    out: dict[str, set[str]] = {}
    for family in MetricsCollector([ck]).collect():
        assert family.samples, f"{family.name} has no sample: this checkpoint does not show every family"
        for s in family.samples:
            out.setdefault(s.name, set()).update(s.labels)
    return {name: frozenset(labels) for name, labels in out.items()}


_SELECTOR = re.compile(r"\b(twopc_[a-z0-9_]+)\s*(\{[^}]*\})?")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")


def unknown_names(expr: str, exported: Mapping[str, frozenset[str]], extra_labels: frozenset[str] = frozenset()
                  ) -> list[str]:
    """What *expr* (PromQL, or a series in promtool's notation) names that twopc does not export:
    metric names, label names in its selectors, and label names it groups by."""
    problems = []
    known_labels = frozenset().union(*exported.values()) | extra_labels
    for name, matchers in _SELECTOR.findall(expr):
        if name not in exported:
            problems.append(f"metric {name}")
            continue
        problems += [f"label {lab} of {name}" for lab in _MATCHER.findall(matchers)
                     if lab not in exported[name] | extra_labels]
    for group in _GROUPING.findall(expr):
        problems += [f"label {lab.strip()}" for lab in group.split(",") if lab.strip() not in known_labels]
    return problems


def _rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_promtool_passes_the_rules_and_their_unit_tests() -> None:
    checked = promtool("check", "rules", RULES.name, cwd=MONITORING)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", RULES_TEST.name, cwd=MONITORING)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_the_rules_and_their_unit_tests_name_only_series_twopc_exports(exported: dict[str, frozenset[str]]) -> None:
    rules = _rules()
    for rule in rules:
        assert unknown_names(rule["expr"], exported) == [], rule["alert"]
    tests = yaml.safe_load(RULES_TEST.read_text())
    series = [s["series"] for t in tests["tests"] for s in t["input_series"]]
    for s in series:
        assert unknown_names(s, exported, TARGET_LABELS) == [], s
    assert {n for r in rules for n, _ in _SELECTOR.findall(r["expr"])} <= {
        n for s in series for n, _ in _SELECTOR.findall(s)}, "a series a rule reads that no test feeds"
    tested = {a["alertname"] for t in tests["tests"] for a in t["alert_rule_test"] if a["exp_alerts"]}
    assert tested == {r["alert"] for r in rules}, "every alert is shown firing in twopc-alerts.test.yml"


def test_a_broken_rule_fails_its_promtool_test(tmp_path: Path) -> None:
    """The promtool test has teeth: the in-doubt alert reading a misspelt metric fails it."""
    shutil.copy(RULES_TEST, tmp_path)
    text = RULES.read_text()
    assert text.count("(twopc_oldest_in_doubt_seconds)") == 1
    (tmp_path / RULES.name).write_text(text.replace("(twopc_oldest_in_doubt_seconds)",
                                                    "(twopc_oldest_in_doubt_second)"))
    tested = promtool("test", "rules", RULES_TEST.name, cwd=tmp_path)
    assert tested.returncode != 0 and "alertname: TwopcInDoubtTransactions" in tested.stdout + tested.stderr, \
        tested.stdout + tested.stderr


def _dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            queries.append(re.sub(r"^label_values\((.*),\s*(\w+)\)$", r"group by (\2) (\1)", query))
    return queries


def test_the_dashboard_queries_only_series_twopc_exports_in_valid_promql(
        exported: dict[str, frozenset[str]], tmp_path: Path) -> None:
    queries = _dashboard_queries()
    assert len(queries) > 10
    for q in queries:
        assert unknown_names(q, exported) == [], q
    shown = {n for q in queries for n, _ in _SELECTOR.findall(q)}
    families = {re.sub(r"_(bucket|sum|count)$", "", n) for n in exported}
    assert {re.sub(r"_(bucket|sum|count)$", "", n) for n in shown} == families, "a metric the dashboard omits"
    # PromQL validity: promtool parses each query as a recording rule ($sink_id as Grafana expands "All")
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"twopc_dashboard_{i}", "expr": q.replace("$sink_id", ".*")} for i, q in enumerate(queries)]}]}
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(rules))
    checked = promtool("check", "rules", "dashboard.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


# -- the alerts on the series a real PostgreSQL sink produces ---------------------------------

#: The scenario's phases: (name, minutes on promtool's clock). Each phase's series are what
#: the collector answered right after the phase's real event; "gone" has no series (the
#: driver's metrics server ended with it).
PHASES = (("healthy", 5), ("in_doubt", 8), ("recovered", 5), ("crowded", 13), ("stuck", 5), ("lost", 5),
          ("gone", 40))


def _series(text: str) -> Series:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.fixture
def small_postgres() -> Iterator[LocalPostgres]:
    """A PostgreSQL server of its own with 5 prepared-transaction slots, for others to fill."""
    server = LocalPostgres(max_prepared_transactions=5)
    server.start()
    try:
        yield server
    finally:
        dispose_engines()
        server.stop()


def _prepare(sink: PostgresSink, sink_id: str, batch: int, partitions: int) -> list[Any]:
    handles = []
    for p in range(partitions):
        txn = sink.begin_transaction(TransactionContext(sink_id, batch, p, p))
        sink.invoke_batch(txn, pa.RecordBatch.from_pydict({"id": pa.array([batch * 10 + p], pa.int64())}))
        handles.append(sink.pre_commit(txn))
    return handles


def _core(sink: PostgresSink, ck: str, sink_id: str) -> WriterCore:
    return WriterCore(sink, sink_id, RuntimeOptions.parse({"checkpointLocation": ck}, streaming=True), skip=False,
                       format_name="twopc-postgres")


def _driver_commit(sink: PostgresSink, ck: str, sink_id: str, batch: int, handles: Sequence[Any]) -> None:
    """The driver's commit of *batch* as Spark calls it (with the metrics it records)."""
    _core(sink, ck, sink_id).commit(
        [TwoPCCommitMessage(dumps_handle(h), 1, h.partition_id, h.attempt_id, time.time()) for h in handles], batch)


def _promtool_series(scrapes: Sequence[Series]) -> list[dict[str, str]]:
    """promtool input series: each scrape's values held for its phase's minutes. Two values
    are moved onto promtool's clock: an in-doubt age grows a minute per minute, and a commit
    time becomes the minute of the phase whose scrape first showed it."""
    keys = sorted({k for s in scrapes for k in s})
    clock: dict[float, float] = {}
    out = []
    for name, labels in keys:
        values: list[str] = []
        for (_phase, minutes), scrape in zip(PHASES, [*scrapes, {}], strict=True):
            value = scrape.get((name, labels))
            start = 60.0 * (len(values))
            if value is None:
                values += ["_"] * minutes
            elif name == "twopc_oldest_in_doubt_seconds" and value > 0:
                values += [repr(value + 60.0 * i) for i in range(minutes)]
            elif name == "twopc_last_commit_timestamp_seconds":
                values += [repr(clock.setdefault(value, start))] * minutes
            else:
                values += [repr(value)] * minutes
        selector = ",".join(f'{k}="{v}"' for k, v in (*labels, ("instance", "driver"), ("job", "spark")))
        out.append({"series": f"{name}{{{selector}}}", "values": " ".join(values)})
    return out


def test_the_alerts_fire_on_the_series_a_real_postgres_sink_produces(small_postgres: LocalPostgres,
                                                                     tmp_path: Path) -> None:
    table = f"mon_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(small_postgres.url)
    with engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL)")
    ck = str(tmp_path / "ck")
    ledger = CommitLedger(ck)
    sid = ledger.bind_sink_id(None, default=f"mon{uuid.uuid4().hex[:8]}")
    registry = CollectorRegistry()
    register_metrics(registry, ck)
    pooled = engine.raw_connection()
    others = pooled.driver_connection  # psycopg's own connection: PREPARE TRANSACTION by hand, in autocommit
    assert others is not None
    others.autocommit = True
    foreign = [f"someone_else_{i}" for i in range(4)]
    scrapes: list[Series] = []

    def scrape() -> None:
        scrapes.append(_series(generate_latest(registry).decode()))

    def sink() -> PostgresSink:
        s = PostgresSink(small_postgres.url, table)
        s.validate(pa.schema([("id", pa.int64())]))
        return s

    try:
        s = sink()
        _driver_commit(s, ck, sid, 0, _prepare(s, sid, 0, 2))
        scrape()  # healthy
        with sink() as s:
            crash_commit(CommitCoordinator(s, ledger, sid), "after_decision", 1, _prepare(s, sid, 1, 2),
                         tmp_path / "f")
        scrape()  # in doubt
        with sink() as s:
            assert RecoveryCoordinator(s, CommitLedger(ck), sink_id=sid).run().finished_batches == [1]
        scrape()  # recovered
        for gid in foreign:  # other users' prepared transactions take 4 of the 5 slots
            cur = others.cursor()
            cur.execute("BEGIN")
            cur.execute(f"PREPARE TRANSACTION '{gid}'")
        s = sink()
        _driver_commit(s, ck, sid, 2, _prepare(s, sid, 2, 1))
        scrape()  # crowded
        for _run in range(3):  # every run of batch 3 fails in a task (a key the table refuses, say): Spark aborts
            with sink() as s:
                _core(s, ck, sid).abort([None, None], 3)
        scrape()  # stuck
        with sink() as s:
            handles = _prepare(s, sid, 3, 1)
            s.abort(handles[0])  # an operator's ROLLBACK PREPARED of a transaction the decision will name
        with pytest.raises(TransactionLostError):
            _driver_commit(sink(), ck, sid, 3, handles)
        scrape()  # lost
    finally:
        cur = others.cursor()
        cur.execute("SELECT gid FROM pg_prepared_xacts")
        for (gid,) in cur.fetchall():
            cur.execute(f"ROLLBACK PREPARED '{gid}'")
        pooled.close()
        engine.dispose()

    labels = (("format", "twopc-postgres"), ("sink_id", sid))
    room = (*labels[:1], ("counted", "max_prepared_transactions"), *labels[1:])
    assert scrapes[1][("twopc_in_doubt_transactions", labels)] == 2
    assert scrapes[3][("twopc_target_prepared_transactions", tuple(sorted(room)))] == 4, scrapes[3]
    assert scrapes[3][("twopc_target_prepared_transactions_limit", tuple(sorted(room)))] == 5
    assert scrapes[3][("twopc_last_commit_timestamp_seconds", labels)] > scrapes[0][
        ("twopc_last_commit_timestamp_seconds", labels)]

    start = dict(zip([p for p, _ in PHASES], [sum(m for _, m in PHASES[:i]) for i in range(len(PHASES))],
                     strict=True))
    own = {"sink_id": sid, "format": "twopc-postgres"}
    checks: list[tuple[int, str, list[dict[str, str]]]] = [
        *[(start["in_doubt"] - 1, r["alert"], []) for r in _rules()],  # a healthy sink alerts on nothing
        (start["in_doubt"] + 3, "TwopcInDoubtTransactions", []),
        (start["recovered"] - 1, "TwopcInDoubtTransactions", [{**own, "severity": "critical"}]),
        (start["crowded"] - 1, "TwopcInDoubtTransactions", []),
        (start["crowded"] - 1, "TwopcRecoveryRan", [{**own, "severity": "warning"}]),
        (start["crowded"] + 3, "TwopcPreparedTransactionsNearLimit", []),
        (start["lost"] - 1, "TwopcPreparedTransactionsNearLimit",
         [{**own, "counted": "max_prepared_transactions", "severity": "warning"}]),
        (start["stuck"] - 1, "TwopcBatchFailsRepeatedly", []),
        (start["lost"] - 1, "TwopcBatchFailsRepeatedly", [{**own, "batch": "3", "severity": "critical"}]),
        (start["gone"] - 1, "TwopcTransactionLost", [{**own, "severity": "critical"}]),
        (start["gone"] - 1, "TwopcCommitFailures", [{**own, "stage": "commit", "severity": "warning"}]),
        (start["gone"] - 1, "TwopcNotCommitting", []),
        (start["gone"] + 39, "TwopcNotCommitting", [{**own, "severity": "warning"}]),
    ]
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)  # their text is the hand-written test's business
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(doc))
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "name": "a real PostgreSQL sink through " + ", ".join(p for p, _ in PHASES), "interval": "1m",
        "input_series": _promtool_series(scrapes),
        "alert_rule_test": [{"eval_time": f"{minute}m", "alertname": alert,
                             "exp_alerts": [{"exp_labels": labels} for labels in expected]}
                            for minute, alert, expected in checks]}]}
    (tmp_path / "real.test.yml").write_text(yaml.safe_dump(test, width=1000))
    tested = promtool("test", "rules", "real.test.yml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr + (tmp_path / "real.test.yml").read_text()
