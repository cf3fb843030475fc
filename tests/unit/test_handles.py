"""Handles travel in a versioned envelope; unknown kinds and newer versions are refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from twopc import TransactionHandle
from twopc.sinks import FileHandle
from twopc.spi import HandleError, HandleVersionError, UnknownHandleKindError
from twopc.spi.runtime import decode_handle, dumps_handle, encode_handle, loads_handle

from tests._paths import REPO_ROOT


def _handle() -> FileHandle:
    return FileHandle("s~1~0~7~ab", "s", 1, 0, 7, rows=3)


def test_envelope_round_trip_preserves_the_handle() -> None:
    h = _handle()
    env = encode_handle(h)
    assert env["kind"] == "twopc.file" and env["version"] == 1
    assert decode_handle(env) == h
    assert loads_handle(dumps_handle(h)) == h


def test_unknown_kind_is_refused_with_the_fix() -> None:
    with pytest.raises(UnknownHandleKindError, match="import the module"):
        decode_handle({"kind": "acme.kafka", "version": 1, "payload": {}})


def test_every_built_in_kind_is_in_the_lookup_table() -> None:
    """A reader that has not imported ``twopc.sinks`` finds each built-in kind's module in
    :data:`twopc._handle.BUILT_IN_KINDS`: the table names every kind the sinks register."""
    import twopc.sinks  # noqa: F401 - registers every built-in kind
    from twopc._handle import BUILT_IN_KINDS, registered_handle_kinds

    shipped = {kind: f"{cls.__module__}:{cls.__qualname__}" for kind, cls in registered_handle_kinds().items()
               if cls.__module__.startswith("twopc.sinks.")}
    assert shipped == dict(BUILT_IN_KINDS)


def test_a_kind_declared_as_an_entry_point_is_imported_on_first_sight(tmp_path: Path) -> None:
    """A sink of another package declares its handle kinds as entry points of group
    ``twopc.handle_kinds``; a process that never imported it decodes its handles."""
    (tmp_path / "acme_sink").mkdir()
    (tmp_path / "acme_sink" / "__init__.py").write_text(
        "from dataclasses import dataclass\n"
        "from twopc import TransactionHandle\n"
        "@dataclass(frozen=True)\n"
        "class QueueHandle(TransactionHandle, kind='acme.queue', version=1):\n"
        "    queue: str = ''\n")
    info = tmp_path / "acme_sink-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-sink\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[twopc.handle_kinds]\nacme.queue = acme_sink:QueueHandle\n")
    envelope = {"kind": "acme.queue", "version": 1,
                "payload": {"txn_id": "t", "sink_id": "s", "batch_id": 1, "partition_id": 0, "attempt_id": 0,
                            "queue": "q1"}}
    script = ("import sys; from twopc.spi.runtime import decode_handle\n"
              f"h = decode_handle({envelope!r})\n"
              "print(type(h).__module__, h.queue)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env=_env_with(tmp_path))
    assert out.returncode == 0 and out.stdout.split() == ["acme_sink", "q1"], out.stderr[-2000:]


def _env_with(path: Path) -> dict[str, str]:
    repo = REPO_ROOT
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(path), str(repo), os.environ.get("PYTHONPATH", "")])}


def test_newer_version_is_refused_not_guessed() -> None:
    env = encode_handle(_handle())
    env["version"] = 2
    with pytest.raises(HandleVersionError, match="upgrade twopc"):
        decode_handle(env)


def test_older_version_without_upgrade_is_refused() -> None:
    @dataclass(frozen=True)
    class V2Handle(TransactionHandle, kind="test.v2", version=2):
        extra: str = ""

    with pytest.raises(HandleVersionError, match="no upgrade"):
        decode_handle({"kind": "test.v2", "version": 1, "payload": {}})


def test_upgrade_hook_reads_older_versions() -> None:
    @dataclass(frozen=True)
    class Upgraded(TransactionHandle, kind="test.upgraded", version=2):
        label: str = ""

        @classmethod
        def upgrade(cls, payload: dict, version: int) -> dict:
            payload["label"] = payload.pop("old_label")
            return payload

    base = {"txn_id": "t", "sink_id": "s", "batch_id": 1, "partition_id": 0, "attempt_id": 0}
    h = decode_handle({"kind": "test.upgraded", "version": 1, "payload": {**base, "old_label": "x"}})
    assert isinstance(h, Upgraded) and h.label == "x"


@pytest.mark.parametrize("bad", ["not json", json.dumps([1]), json.dumps({"kind": "twopc.file"})])
def test_malformed_envelopes_are_handle_errors(bad: str) -> None:
    with pytest.raises(HandleError):
        loads_handle(bad)


def test_damaged_payload_is_reported() -> None:
    env = encode_handle(_handle())
    env["payload"]["surprise"] = 1
    with pytest.raises(HandleError, match="damaged"):
        decode_handle(env)


def test_handles_hold_no_credentials() -> None:
    from twopc.sinks import PostgresHandle

    fields = {f for f in PostgresHandle.__dataclass_fields__}
    assert not fields & {"url", "password", "user", "dsn"}
