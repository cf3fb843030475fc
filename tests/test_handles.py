"""Handles travel in a versioned envelope; unknown kinds and newer versions are refused."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from sinks import FileHandle
from twopc import (
    HandleError,
    HandleVersionError,
    TransactionHandle,
    UnknownHandleKindError,
    decode_handle,
    dumps_handle,
    encode_handle,
    loads_handle,
)


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
    from sinks import PostgresHandle

    fields = {f for f in PostgresHandle.__dataclass_fields__}
    assert not fields & {"url", "password", "user", "dsn"}
