"""Every ``twopc`` command a message suggests runs as pasted.

A suggested command stands between backticks and starts with ``twopc `` (see
:mod:`twopc._advice`). Each message that suggests one is provoked here through the real
ledger, coordinator, status and file sink (no server), its commands are extracted, their
``<placeholders>`` replaced with values an operator would give, and each is read by the command
line's own parser (:func:`twopc.recovery._cli.parse_command`, with every check that needs no
checkpoint and no target). The string constants of the packages are scanned the same way, for
the messages this module cannot provoke without a server."""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from twopc import (
    CommitCoordinator,
    CommitLedger,
    RecoveryCoordinator,
    TwoPCError,
    sink_status,
)
from twopc._coordinator import _pending
from twopc._sink_id_claim import claim_sink_id
from twopc.ledger._stores import FolderRecords
from twopc.recovery._cli import parse_command
from twopc.sinks import FileSink
from twopc.spi import SinkUnavailableError
from twopc.spi.operations import open_store

from tests._filesink_helpers import crash_commit, run_task
from tests._paths import REPO_ROOT

SINK = "job1"
#: a suggested command, as every message spells one
COMMAND = re.compile(r"(?<!`)`(twopc [^`]+)`(?!`)")
#: what an operator gives for each placeholder
VALUES = {"<checkpointLocation>": "/durable/checkpoints/events", "<format>": "twopc-postgres",
          "<url>": "postgresql://db:5432/app", "<dbtable>": "public.events", "<key>": "url",
          "<value>": "postgresql://db2:5432/app", "<batch>": "3"}
_PLACEHOLDER = re.compile(r"<[\w-]+>")


def suggested(message: str) -> list[str]:
    """The commands *message* suggests, placeholders filled in."""
    out = []
    for found in COMMAND.findall(message):
        filled = found
        for placeholder, value in VALUES.items():
            filled = filled.replace(placeholder, value)
        assert not _PLACEHOLDER.search(filled), f"a placeholder without a value in `{found}`: add it to VALUES"
        out.append(filled)
    return out


def assert_parses(command: str, message: str) -> None:
    argv = shlex.split(command)
    assert argv[0] == "twopc", command
    try:
        parse_command(argv[1:])
    except SystemExit as exc:
        if exc.code != 0:  # 0: --help, which runs as pasted
            pytest.fail(f"`{command}` does not parse (exit {exc.code}); it is suggested by: {message}")


# -- the messages, provoked ------------------------------------------------------------------------

def _decided(tmp: Path, ledger: CommitLedger | None = None) -> tuple[FileSink, CommitLedger]:
    """A file sink whose driver died right after deciding batch 0 (two partitions)."""
    sink = FileSink(str(tmp / "out"))
    if ledger is None:
        ledger = CommitLedger(str(tmp / "my checkpoints" / "events"))  # a space: the command must quote it
        ledger.bind_sink_id(None, default=SINK)
    crash_commit(CommitCoordinator(sink, ledger, SINK), "after_decision", 0,
                 [run_task(sink, SINK, 0, p, p, [p]) for p in range(2)], tmp / "faults")
    return sink, ledger


def _refusal(call: Callable[[], object]) -> str:
    """The message of the error *call* raises."""
    with pytest.raises(TwoPCError) as err:
        call()
    return str(err.value)


def _in_target(tmp: Path) -> CommitLedger:
    """The ledger of a write without a checkpoint, kept in its target (here a folder's store)."""
    return CommitLedger(f"files {tmp / 'out'} sink {SINK}",
                        store=FolderRecords(open_store(str(tmp / "target-ledger")), make=True))


def _lost(sink: FileSink, ledger: CommitLedger) -> str:
    for handle in sink.list_prepared(SINK):
        sink.abort(handle)  # an operator's rollback by hand: the decided batch's rows are gone
    message = _refusal(RecoveryCoordinator(sink, ledger, sink_id=SINK).run)
    assert "neither prepared nor committed" in message, message
    return message


def _unanswered(sink: FileSink, ledger: CommitLedger, format_name: str) -> str:
    [decision] = ledger.pending()
    return _pending(sink, ledger, decision, 3, SinkUnavailableError("no reply"), format_name)


def _status(sink: FileSink, ledger: CommitLedger) -> str:
    status = sink_status(sink, ledger, SINK)
    assert status.needs_operator
    return status.render()


def target_mismatch_with_a_decided_batch(tmp: Path) -> str:
    ledger = _decided(tmp)[1]
    return _refusal(lambda: ledger.bind_target(f"files {tmp / 'elsewhere'}", SINK))


def target_mismatch(tmp: Path) -> str:
    ledger = CommitLedger(str(tmp / "my checkpoints" / "events"))
    ledger.bind_target(f"files {tmp / 'out'}", SINK)
    return _refusal(lambda: ledger.bind_target(f"files {tmp / 'elsewhere'}", SINK))


def retarget_refused(tmp: Path) -> str:
    ledger = _decided(tmp)[1]
    return _refusal(lambda: ledger.retarget(f"files {tmp / 'elsewhere'}", SINK))


def transaction_lost(tmp: Path) -> str:
    return _lost(*_decided(tmp))


def transaction_lost_in_the_target(tmp: Path) -> str:
    return _lost(*_decided(tmp, _in_target(tmp)))


def commit_without_an_answer(tmp: Path) -> str:
    return _unanswered(*_decided(tmp), "twopc-file")


def commit_without_an_answer_in_the_target(tmp: Path) -> str:
    return _unanswered(*_decided(tmp, _in_target(tmp)), "twopc-jdbc")


def status_needs_an_operator(tmp: Path) -> str:
    return _status(*_decided(tmp))


def status_of_a_write_without_a_checkpoint(tmp: Path) -> str:
    return _status(*_decided(tmp, _in_target(tmp)))


def sink_id_of_another_query(tmp: Path) -> str:
    sink = FileSink(str(tmp / "out"))
    claim_sink_id(sink, SINK, str(tmp / "first checkpoint"))
    return _refusal(lambda: claim_sink_id(sink, SINK, str(tmp / "second")))


def damaged_checkpoint(tmp: Path) -> str:
    _sink, ledger = _decided(tmp)
    [record] = (Path(ledger.location) / "decisions").iterdir()
    record.write_text('{"batch_id": 0, "handles": [')  # truncated
    message = _refusal(CommitLedger(ledger.checkpoint_location).pending)
    assert "damaged" in message, message
    return message


#: each message that tells the operator what to run
SUGGESTING: list[Callable[[Path], str]] = [
    target_mismatch_with_a_decided_batch, target_mismatch, retarget_refused, transaction_lost,
    transaction_lost_in_the_target, commit_without_an_answer, commit_without_an_answer_in_the_target,
    status_needs_an_operator, status_of_a_write_without_a_checkpoint, sink_id_of_another_query,
]
#: messages that may suggest a command: whatever they suggest must parse
OTHERS: list[Callable[[Path], str]] = [damaged_checkpoint]


@pytest.mark.parametrize("provoke", SUGGESTING + OTHERS, ids=lambda f: f.__name__)
def test_every_command_a_message_suggests_parses(provoke: Callable[[Path], str], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    message = provoke(tmp_path)
    commands = suggested(message)
    if provoke in SUGGESTING:
        assert commands, f"no `twopc ...` command in backticks in: {message}"
    for command in commands:
        assert_parses(command, message)


@pytest.mark.parametrize("provoke", [target_mismatch_with_a_decided_batch, target_mismatch, retarget_refused,
                                     transaction_lost, status_needs_an_operator], ids=lambda f: f.__name__)
def test_a_suggested_command_names_the_checkpoint_as_one_argument(provoke: Callable[[Path], str],
                                                                  tmp_path: Path) -> None:
    """The checkpoint holds a space: pasted, the command still gets it as one argument."""
    for command in suggested(provoke(tmp_path)):
        args = parse_command(shlex.split(command)[1:])
        assert (args.checkpoint or args.location).endswith("/my checkpoints/events"), command


def test_the_target_mismatch_message_names_each_target_once_and_is_short(tmp_path: Path) -> None:
    message = target_mismatch_with_a_decided_batch(tmp_path)
    assert message.count(f"files {tmp_path / 'out'}") == 1 and message.count(f"files {tmp_path / 'elsewhere'}") == 1
    assert "nothing is lost" in message and len(message) < 700, (len(message), message)


# -- the packages' string constants ------------------------------------------------------------------

def _strings(path: Path) -> Iterator[tuple[int, str]]:
    """Each string literal of *path* (an f-string with ``<value>`` for what it formats), but
    docstrings, which show commands as ``twopc recover`` for the manual, not to paste."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    parts_of_fstrings = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(str(v.value) if isinstance(v, ast.Constant) else "7" for v in node.values)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
              and id(node) not in parts_of_fstrings):
            yield node.lineno, node.value


def _sources() -> list[Path]:
    return sorted(p for folder in ("twopc", "sinks", "recovery") for p in (REPO_ROOT / folder).rglob("*.py")
                  if "demos" not in p.parts and not p.is_symlink() and not any(q.is_symlink() for q in p.parents))


def test_every_command_in_the_packages_strings_parses(capsys: pytest.CaptureFixture[str]) -> None:
    found = 0
    for path in _sources():
        for line, text in _strings(path):
            for command in suggested(text):
                found += 1
                assert_parses(command, f"{path.relative_to(REPO_ROOT)}:{line}: {text}")
    assert found >= 5, f"only {found} suggested commands found: is the scan reading the packages?"
