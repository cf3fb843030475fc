"""The sink contract's one commit question, ``commit_shape``, and the import graph of twopc.

The coordinator asks a sink :meth:`~twopc.spi.BatchCommit.commit_shape` once and acts on
the answer alone; and twopc's modules import one another without cycles (none kept alive by
an import inside a function or under ``TYPE_CHECKING``)."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest

import twopc
from twopc import CommitCoordinator, CommitLedger, CommitOutcome, CommitShape, faultinject
from twopc.sinks import FileHandle, FileSink

from tests._filesink_helpers import committed_ids, run_task


class _Shaped(FileSink):
    """A file sink that answers *shape* and counts the handles of each ``commit_all``."""

    shape: ClassVar[CommitShape] = CommitShape.PER_HANDLE
    calls: ClassVar[list[int]] = []

    def commit_shape(self, handles: Sequence[FileHandle] = ()) -> CommitShape:
        return self.shape

    def commit_all(self, handles: Sequence[FileHandle], *, recovering: bool = False) -> list[CommitOutcome]:
        self.calls.append(len(handles))
        return [self.commit(h) for h in handles]


@pytest.mark.parametrize(("shape", "calls"), [(CommitShape.PER_HANDLE, [1, 2]), (CommitShape.ONE_CALL, [3]),
                                              (CommitShape.WHOLE_BATCH, [3]), (CommitShape.LOCAL_TRANSACTION, [3])])
def test_the_coordinator_commits_as_the_commit_shape_says(tmp_path: Path, shape: CommitShape,
                                                          calls: list[int]) -> None:
    """``PER_HANDLE``: the first handle, then the others; every other shape: all handles in
    one ``commit_all``."""
    sink = type("Shaped", (_Shaped,), {"shape": shape, "calls": []})(str(tmp_path / "out"))
    coord = CommitCoordinator(sink, CommitLedger(str(tmp_path / "ck")), "q1")
    coord.commit_batch(0, [run_task(sink, "q1", 0, p, 0, [p]) for p in range(3)])
    assert sink.calls == calls
    assert committed_ids(sink) == [0, 1, 2]


@pytest.mark.parametrize(("shape", "visible"), [(CommitShape.PER_HANDLE, []),
                                                (CommitShape.LOCAL_TRANSACTION, [0, 1])])
def test_a_local_transaction_commits_before_the_batch_is_recorded(tmp_path: Path, shape: CommitShape,
                                                                  visible: list[int]) -> None:
    """A driver dying at ``after_decision`` has committed nothing yet in the per-handle
    shape (the decision comes first); a local transaction has committed already (it is
    its own decision)."""
    sink = type("Shaped", (_Shaped,), {"shape": shape, "calls": []})(str(tmp_path / "out"))
    coord = CommitCoordinator(sink, CommitLedger(str(tmp_path / "ck")), "q1")
    handles = [run_task(sink, "q1", 0, p, 0, [p]) for p in range(2)]
    with (faultinject.armed("after_decision@batch=0:raise", state_dir=str(tmp_path / "f")),
          pytest.raises(faultinject.InjectedFault)):
        coord.commit_batch(0, handles)
    assert committed_ids(sink) == visible


def _cycles(package: Path) -> list[list[str]]:
    """The strongly connected components (more than one module) of *package*'s relative
    imports, wherever they stand (top level, a function, ``if TYPE_CHECKING``)."""
    edges: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        edges[path.stem] = deps
    edges = {m: {d for d in deps if d in edges} for m, deps in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return found


def test_twopc_modules_import_each_other_without_cycles() -> None:
    assert _cycles(Path(twopc.__file__).parent) == []
