"""``twopc status`` advises, for each state it can show, what to do, and every command it
advises works in that state: pasted into the CLI, it settles the state (a lost batch needs its
rows restored first: the advice says so and gives the command for after). On the file sink,
through the CLI itself (``twopc.recovery._cli.main``)."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from twopc import CommitCoordinator, CommitLedger
from twopc.operations._metrics import record_batch  # what Spark's abort of each failed run records
from twopc.recovery._cli import main
from twopc.sinks import FileSink

from tests._filesink_helpers import committed_ids, crash_commit, run_task

SINK = "job1"


def _status(capsys: pytest.CaptureFixture[str], where: list[str]) -> tuple[int, str]:
    code = main(["status", *where])
    return code, capsys.readouterr().out


def _advised(text: str) -> list[str]:
    """Every command between backticks in the advice lines of a status."""
    advice = text.split("needs an operator:", 1)[1] if "needs an operator:" in text else ""
    return re.findall(r"`(twopc [^`]+)`", advice)


def _run(command: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    argv = shlex.split(command)
    assert argv[0] == "twopc"
    code = main(argv[1:])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _in_doubt(sink: FileSink, ledger: CommitLedger, tmp: Path) -> None:
    handles = [run_task(sink, SINK, 0, p, p, [p]) for p in range(2)]
    crash_commit(CommitCoordinator(sink, ledger, SINK), "after_decision", 0, handles, tmp / "f")


def _committed_unmarked(sink: FileSink, ledger: CommitLedger, tmp: Path) -> None:
    handles = [run_task(sink, SINK, 0, p, p, [p]) for p in range(2)]
    crash_commit(CommitCoordinator(sink, ledger, SINK), "after_commit", 0, handles, tmp / "f")


def _lost(sink: FileSink, ledger: CommitLedger, tmp: Path) -> None:
    handles = [run_task(sink, SINK, 0, p, p, [p]) for p in range(2)]
    crash_commit(CommitCoordinator(sink, ledger, SINK), "after_decision", 0, handles, tmp / "f")
    sink.abort(handles[1])  # an operator's rollback of a decided transaction: its rows are lost


def _orphan(sink: FileSink, ledger: CommitLedger, tmp: Path) -> None:
    run_task(sink, SINK, 0, 0, 9, [100])


STATES: dict[str, tuple[Callable[[FileSink, CommitLedger, Path], None], list[int]]] = {
    "in-doubt": (_in_doubt, [0, 1]),
    "decided-gone, committed": (_committed_unmarked, [0, 1]),
    "decided-gone, lost": (_lost, [0]),
    "orphan": (_orphan, []),
}


@pytest.mark.parametrize("state", list(STATES))
def test_every_command_status_advises_settles_its_state(state: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    make, expected_ids = STATES[state]
    sink = FileSink(str(tmp_path / "out"))
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id(None, default=SINK)
    make(sink, ledger, tmp_path)
    where = ["--checkpoint", str(tmp_path / "ck"), "--format", "twopc-file", "--option", f"path={tmp_path / 'out'}"]
    code, text = _status(capsys, where)
    assert code == 1, text
    commands = _advised(text)
    assert commands, f"status advises no command for {state}:\n{text}"
    for command in commands:
        code, out = _run(command, capsys)
        if code != 0 and "--accept-lost" not in command:
            assert state == "decided-gone, lost" and "lost" in out, f"{command!r} failed in state {state}: {out}"
    code, text = _status(capsys, where)
    assert code == 0, text
    assert committed_ids(sink) == expected_ids


def test_a_batch_that_failed_at_every_run_is_called_stuck_with_what_to_do(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    FileSink(str(tmp_path / "out"))
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id(None, default=SINK)
    where = ["--checkpoint", str(tmp_path / "ck"), "--format", "twopc-file", "--option", f"path={tmp_path / 'out'}"]

    for _run_of_batch in range(3):
        record_batch(ledger, sink_id=SINK, format_name="twopc-file", action="aborted", committed=0,
                     already_committed=0, aborted=0, swept=0, seconds=0.0, rows=0, first_prepared_at=None, batch_id=4)
    code, text = _status(capsys, where)
    assert code == 1 and "stuck: batch 4 failed at each of its last 3 runs" in text, text
    code, out = _status(capsys, [*where, "--json"])
    assert json.loads(out)["failing_batch"] == {"batch": 4, "failed_runs": 3}
    record_batch(ledger, sink_id=SINK, format_name="twopc-file", action="committed", committed=1,
                 already_committed=0, aborted=0, swept=0, seconds=0.0, rows=1, first_prepared_at=None, batch_id=4)
    assert _status(capsys, where)[0] == 0
