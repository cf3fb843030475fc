"""Helpers that play Spark's part against the real file sink, without Spark."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twopc import CommitCoordinator, TransactionContext, TransactionHandle, faultinject
from twopc.sinks import FileHandle, FileSink


def run_task(sink: FileSink, sink_id: str, batch: int, partition: int, attempt: int,
             ids: list[int]) -> FileHandle:
    """One task attempt: open, load, prepare. Returns the handle Spark would ship."""
    txn = sink.begin_transaction(TransactionContext(sink_id, batch, partition, attempt))
    sink.invoke_batch(txn, pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64())}))
    return sink.pre_commit(txn)


def committed_ids(sink: FileSink | str | Path) -> list[int]:
    """Every id in the committed (visible) files of *sink* (or of a file sink on a folder),
    duplicates included, sorted."""
    if not isinstance(sink, FileSink):
        sink = FileSink(str(sink))
    out: list[int] = []
    for path in sink.committed_files():
        table = pq.read_table(path)
        if table.num_columns:
            out += table.column("id").to_pylist()
    return sorted(out)


def assert_nothing_left(out: str | Path, sink_id: str) -> None:
    """No prepared or staging file of *sink_id* is left in the file sink's folder *out* (what
    a sink that hides prepared transactions from its own list_prepared cannot fake)."""
    for state in ("prepared", "staging"):
        folder = Path(out, "_twopc", state)
        left = [p.name for p in folder.glob(f"{sink_id}~*")] if folder.is_dir() else []
        assert not left, f"{state} files of {sink_id} left: {left}"


def crash_commit(coord: CommitCoordinator, point: str, batch: int, handles: Sequence[TransactionHandle],
                 state_dir: Path) -> None:
    """The driver dies at fault *point* while committing *batch* (the fault must fire)."""
    with (faultinject.armed(f"{point}@batch={batch}:raise", state_dir=str(state_dir)),
          pytest.raises(faultinject.InjectedFault)):
        coord.commit_batch(batch, handles)
