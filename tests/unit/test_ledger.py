"""The commit ledger: atomic, write-once decisions and committed marks."""

from __future__ import annotations

import os

import pytest

from twopc import CommitLedger, ConfigurationError, LedgerError
from twopc.sinks import FileHandle
from twopc.spi import ProtocolError
from twopc.spi.operations import BatchState, Decision


def _decision(batch: int, n: int = 2, sink: str = "s1") -> Decision:
    return Decision(sink, batch, tuple(FileHandle(f"{sink}~{batch}~{p}~{p}~00", sink, batch, p, p) for p in range(n)))


def test_batch_moves_undecided_decided_committed(tmp_path) -> None:
    ledger = CommitLedger(str(tmp_path))
    assert ledger.state(0) is BatchState.UNDECIDED
    ledger.record_decision(_decision(0))
    assert ledger.state(0) is BatchState.DECIDED
    assert [d.batch_id for d in ledger.pending()] == [0]
    ledger.mark_committed(0)
    assert ledger.state(0) is BatchState.COMMITTED
    assert ledger.pending() == [] and ledger.latest_committed() == 0


def test_decision_is_written_once(tmp_path) -> None:
    ledger = CommitLedger(str(tmp_path))
    first = ledger.record_decision(_decision(3))
    assert ledger.record_decision(_decision(3)).txn_ids == first.txn_ids
    with pytest.raises(ProtocolError, match="different decision"):
        ledger.record_decision(_decision(3, n=1))


def test_decision_survives_a_new_process_view(tmp_path) -> None:
    CommitLedger(str(tmp_path)).record_decision(_decision(5))
    again = CommitLedger(str(tmp_path)).decision(5)
    assert again is not None and again.handles == _decision(5).handles


def test_no_temporary_files_are_left_behind(tmp_path) -> None:
    ledger = CommitLedger(str(tmp_path))
    ledger.record_decision(_decision(1))
    ledger.mark_committed(1)
    for root, _dirs, files in os.walk(tmp_path / "twopc"):
        assert not [f for f in files if f.endswith(".tmp")], root


def test_purge_keeps_the_newest_and_every_pending_batch(tmp_path) -> None:
    ledger = CommitLedger(str(tmp_path))
    for b in range(6):
        ledger.record_decision(_decision(b))
        if b != 4:
            ledger.mark_committed(b)
    assert ledger.purge(keep_last=2) == [0, 1, 2]
    assert ledger.committed_batches() == [3, 5]
    assert ledger.state(4) is BatchState.DECIDED


def test_sink_id_is_bound_on_first_use(tmp_path) -> None:
    ledger = CommitLedger(str(tmp_path))
    assert ledger.bind_sink_id(None, default="dflt") == "dflt"
    assert CommitLedger(str(tmp_path)).bind_sink_id(None, default="other") == "dflt"
    with pytest.raises(ConfigurationError, match="belongs to sink id 'dflt'"):
        ledger.bind_sink_id("another", default="x")


def test_damaged_record_is_a_ledger_error(tmp_path) -> None:
    ledger = CommitLedger(str(tmp_path))
    ledger.record_decision(_decision(2))
    path = tmp_path / "twopc" / "decisions" / f"{2:020d}.json"
    path.write_text("{ torn")
    with pytest.raises(LedgerError, match="damaged"):
        ledger.decision(2)


def test_file_uri_locations_work(tmp_path) -> None:
    ledger = CommitLedger(f"file://{tmp_path}/ck")
    ledger.record_decision(_decision(7))
    ledger.mark_committed(7)
    assert CommitLedger(f"file://{tmp_path}/ck").state(7) is BatchState.COMMITTED


def test_a_pyarrow_filesystem_without_create_if_absent_is_refused() -> None:
    """pyarrow's object-store filesystems can only check, then move: two drivers could both
    be told their decision stands. The ledger refuses them rather than racing."""
    import pyarrow.fs as pafs

    with pytest.raises(ConfigurationError, match="at most once"):
        CommitLedger("bucket/query", filesystem=pafs._MockFileSystem())
