"""The summary table ``make bench`` ends with (:mod:`twopc.recovery.demos.bench_summary`): each
recorded figure judged against its target in the right direction, the missing ones named, the
results file written only when a run asked for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from twopc.recovery.demos._bench_results import RESULTS_ENV, record
from twopc.recovery.demos.bench_summary import TARGETS, Target, judge, read_records, summary_table


def _line(table: str, label: str) -> str:
    (line,) = [x for x in table.splitlines() if label in x]
    return line


@pytest.mark.parametrize(("better", "value", "expected"), [
    ("lower", 1.05, "MET"), ("lower", 1.15, "MET"), ("lower", 1.2, "MISSED"),
    ("higher", 1.6, "MET"), ("higher", 1.5, "MET"), ("higher", 1.2, "MISSED"),
])
def test_judge_follows_the_direction_of_the_target(better: str, value: float, expected: str) -> None:
    goal = 1.15 if better == "lower" else 1.5
    assert judge(Target("x", better, goal), value) == expected  # type: ignore[arg-type] # parametrized literal


def test_the_table_labels_each_ratio_met_or_missed_against_its_own_target() -> None:
    records = [
        {"key": "first_write.twopc_vs_noop", "value": 1.40, "detail": "8.4 s / 6.0 s", "load": 3.1},
        {"key": "throughput.prepared_vs_spark", "value": 1.98, "detail": "", "load": 2.0},
        {"key": "micro_batch.twopc_vs_noop", "value": 1.05, "detail": "", "load": 2.5},
        {"key": "stream.exactly_vs_at_least", "value": 0.5, "detail": "", "load": 2.5},
        {"key": "redis.sink_vs_plain_presummed", "value": 0.71, "detail": "", "load": 2.5},
        {"key": "composite.vs_two_writes", "value": 0.9, "detail": "first", "load": 2.5},
        {"key": "composite.vs_two_writes", "value": 1.41, "detail": "last", "load": 2.5},
        {"key": "mariadb.xa_vs_plain", "value": 0.8, "detail": "", "load": 2.5},
    ]
    table = summary_table(records, "2 cores, Some CPU", "2026-11-26")
    assert table.splitlines()[0] == ("bench summary: 2 cores, Some CPU; 2026-11-26; "
                                     "load average while measured 2.00 .. 3.10")
    # lower is better: 1.40x the no-op floor misses a target of 1.1x
    assert "1.40x" in (fw := _line(table, TARGETS["first_write.twopc_vs_noop"].label)) and "MISSED" in fw
    assert "<= 1.1x" in fw
    # higher is better: 1.98x Spark's writer meets a target of 1.5x
    assert "MET" in (tp := _line(table, TARGETS["throughput.prepared_vs_spark"].label)) and ">= 1.5x" in tp
    assert " MET " in _line(table, TARGETS["micro_batch.twopc_vs_noop"].label)
    assert "MISSED" in _line(table, TARGETS["stream.exactly_vs_at_least"].label)
    # a figure reported without a target is neither
    no_goal = _line(table, TARGETS["redis.sink_vs_plain_per_row"].label)
    assert "none" in no_goal and "MET" not in no_goal and "MISSED" not in no_goal
    # the last record of a key wins; a target nobody measured says so; an unknown key still shows
    assert "last" in (comp := _line(table, TARGETS["composite.vs_two_writes"].label)) and "MET" in comp
    assert "not measured" in _line(table, TARGETS["protocol.staging_ms"].label)
    assert "0.80x" in _line(table, "mariadb.xa_vs_plain")


def test_a_run_records_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "bench" / "results.jsonl"
    monkeypatch.delenv(RESULTS_ENV, raising=False)
    record("composite.vs_two_writes", 1.2)
    assert not results.exists()
    monkeypatch.setenv(RESULTS_ENV, str(results))
    record("composite.vs_two_writes", 1.2, "median of 3")
    (rec,) = read_records(results)
    assert (rec["key"], rec["value"], rec["detail"]) == ("composite.vs_two_writes", 1.2, "median of 3")
    assert rec["load"] >= 0
