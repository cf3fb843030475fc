"""twopc-http against the reference service on 127.0.0.1 (tests/_http_service.py), without Spark:
what it refuses, the keys, retries and Retry-After, dead letters, an aborted batch, a batch left
in doubt and what ``twopc status`` then shows, a server that ignores keys, TLS, and where the
credentials never go. (The protocol's promises: tests/kit; crashes: tests/chaos/test_http_chaos.py.)"""

from __future__ import annotations

import email.utils
import json
import logging
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from twopc import (
    CommitCoordinator,
    CommitLedger,
    CommitOutcome,
    ConfigurationError,
    RecoveryCoordinator,
    TransactionContext,
    Xid,
    faultinject,
    sink_status,
)
from twopc.sinks import HttpSink
from twopc.sinks.http._deliver import retry_after
from twopc.spi import CommitPendingError, MissingOptionError, ProtocolError, SinkUnavailableError
from twopc.spi.runtime import CommitRetry, dumps_handle

from tests._http_service import HttpService, self_signed

TOKEN = "tok-Very5ecret-xyz"


@pytest.fixture
def service() -> Iterator[HttpService]:
    with HttpService() as s:
        yield s


def make(service: HttpService, tmp_path: Path, **extra: str) -> HttpSink:
    options = {"url": f"{service.url}/orders/{{id}}", "outbox": str(tmp_path / "outbox"), "token": TOKEN,
               "transactionHeader": "Twopc-Transaction", "retryBackoff": "10ms", "retryBackoffMax": "100ms",
               **extra}
    return HttpSink.from_options(options)


def rows(ids: list[int]) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "note": pa.array([f"n{i}" for i in ids])})


def prepare(sink: HttpSink, ids: list[int], batch: int = 0, partition: int = 0, sink_id: str = "s1") -> Any:
    txn = sink.begin_transaction(TransactionContext(sink_id, batch, partition, batch * 100 + partition + 1))
    sink.invoke_batch(txn, rows(ids))
    return sink.pre_commit(txn)


@pytest.mark.parametrize(("options", "error", "says"), [
    ({}, MissingOptionError, 'needs option "url"'),
    ({"url": "ftp://h/x"}, ConfigurationError, "http:// or https://"),
    ({"url": "https://bob:hunter22@h/x"}, ConfigurationError, "give them as options user and password"),
    ({"url": "https://h/x?api_key=zz9"}, ConfigurationError, "apiKeyHeader and apiKey"),
    ({"url": "https://h/x/{id"}, ConfigurationError, "a column is written {column}"),
    ({"url": "https://h/x/{id!r}"}, ConfigurationError, "write {column_name}"),
    ({"url": "https://h/x", "header.Authorization": "Bearer zz9"}, ConfigurationError, "option token"),
    ({"url": "https://h/x", "token": "zz9", "user": "u", "password": "pw9"}, ConfigurationError, "one way"),
    ({"url": "https://h/x", "user": "u"}, MissingOptionError, "add option password"),
    ({"url": "https://h/x", "maxConcurency": "4"}, ConfigurationError, "did you mean 'maxConcurrency'?"),
    ({"url": "https://h/x", "tlsVerify": "false", "tlsCaBundle": "/ca.pem"}, ConfigurationError, "drop one"),
    ({"url": "https://h/x", "method": "GET"}, ConfigurationError, "method must be POST, PUT, PATCH or DELETE"),
    ({"url": "https://h/x", "timeout": "0"}, ConfigurationError, "must not wait forever"),
])
def test_bad_options_are_refused_naming_the_fix(options: dict[str, str], error: type[Exception], says: str) -> None:
    with pytest.raises(error) as caught:
        HttpSink.from_options(options)
    assert says in str(caught.value)
    assert "hunter22" not in str(caught.value) and "zz9" not in str(caught.value)


def test_validate_checks_columns_and_secrets_and_sends_nothing(service: HttpService, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"no column.*order_id.*option url"):
        HttpSink.from_options({"url": f"{service.url}/o/{{order_id}}", "outbox": str(tmp_path)}).validate(
            rows([1]).schema)
    with pytest.raises(ConfigurationError, match=r"TWOPC_TEST_UNSET_TOKEN.*not set on the driver"):
        HttpSink.from_options({"url": f"{service.url}/o/{{id}}", "outbox": str(tmp_path),
                               "tokenEnv": "TWOPC_TEST_UNSET_TOKEN"}).validate(rows([1]).schema)
    with pytest.raises(MissingOptionError, match="needs option outbox"):
        HttpSink.from_options({"url": f"{service.url}/o/{{id}}"}).validate(rows([1]).schema)
    assert service.count() == 0


def test_prepare_sends_nothing_commit_sends_each_row_once_with_its_key_and_token(service: HttpService,
                                                                                 tmp_path: Path) -> None:
    sink = make(service, tmp_path)
    handles = [prepare(sink, [1, 2, 3], partition=0), prepare(sink, [4, 5], partition=1)]
    assert service.count() == 0
    assert sink.commit_all(handles) == [CommitOutcome.COMMITTED] * 2
    assert sorted(service.ids()) == [1, 2, 3, 4, 5]
    assert {s.path for s in service.log} == {f"/orders/{i}" for i in range(1, 6)}
    assert {s.auth for s in service.log} == {f"Bearer {TOKEN}"}
    assert {s.txn for s in service.log} == {h.txn_id for h in handles}
    assert sink.commit_all(handles) == [CommitOutcome.ALREADY_COMMITTED] * 2
    assert service.count() == 5 and sink.list_prepared("s1") == []


def test_the_url_template_encodes_a_value_as_one_path_segment(service: HttpService, tmp_path: Path) -> None:
    sink = make(service, tmp_path, url=f"{service.url}/orders/{{note}}/items", bodyColumn="note", method="PUT")
    txn = sink.begin_transaction(TransactionContext("s1", 0, 0, 1))
    sink.invoke_batch(txn, pa.record_batch({"id": [1], "note": ["a/b c?"]}))
    sink.commit(sink.pre_commit(txn))
    assert [(s.method, s.path, s.body) for s in service.log] == [("PUT", "/orders/a%2Fb%20c%3F/items", b"a/b c?")]


def _replayed(sink_class: type[HttpSink], service: HttpService, tmp_path: Path) -> Counter[int]:
    """Rows 1-6 written by batch 0 in one partition, then by a replay of it in two partitions
    (a recomputation twopc does not know of: another sink instance, same sink id)."""
    options = {"url": f"{service.url}/orders/{{id}}", "outbox": str(tmp_path / "ob"), "keyColumn": "id"}
    sink = sink_class.from_options(options)
    sink.commit(prepare(sink, [1, 2, 3, 4, 5, 6], batch=0))
    again = sink_class.from_options(options)
    again.commit_all([prepare(again, [2, 4, 6], batch=0, partition=0), prepare(again, [1, 3, 5], batch=0, partition=1)])
    return Counter(service.ids())


def test_the_same_row_of_a_replayed_batch_gets_the_same_key(tmp_path: Path) -> None:
    from tests._broken_http_sinks import KeyChangesOnReplay

    with HttpService() as service:
        applied = _replayed(HttpSink, service, tmp_path / "good")
        assert applied == Counter(range(1, 7)), applied
        assert all(s.answer == 201 for s in service.log) and len(service.log) == 12  # 6 replayed answers
    with HttpService() as service:
        applied = _replayed(KeyChangesOnReplay, service, tmp_path / "bad")
        assert applied == Counter({i: 2 for i in range(1, 7)})  # the planted bug: every row applied twice


def test_retries_500s_429_and_503_with_retry_after_and_slow_answers_then_once(service: HttpService,
                                                                              tmp_path: Path) -> None:
    sink = make(service, tmp_path, timeout="1s", maxConcurrency="4", maxRetries="12", retryBackoffMax="400ms")
    handle = prepare(sink, list(range(12)))
    past = email.utils.formatdate(time.time() - 5, usegmt=True)
    service.fail(3)
    service.throttle(2, 429, "0")
    service.throttle(2, 503, past)
    service.slow(1, 1.3)  # answered after the client's timeout: its retry meets 409 (in flight), then the stored answer
    assert sink.commit(handle) is CommitOutcome.COMMITTED
    assert Counter(service.ids()) == Counter(range(12))
    answers = Counter(s.answer for s in service.log)
    assert answers[500] == 3 and answers[429] == 2 and answers[503] == 2 and answers[201] >= 12


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = time.time()
    assert retry_after("120", now) == 120.0
    assert 59 <= (retry_after(email.utils.formatdate(now + 60, usegmt=True), now) or 0) <= 61
    assert retry_after("soon", now) is None and retry_after(None, now) is None


def test_a_batch_that_keeps_failing_stays_in_doubt_lists_its_keys_and_is_delivered_later(service: HttpService,
                                                                                         tmp_path: Path) -> None:
    sink = make(service, tmp_path, maxConcurrency="1", maxRetryAfter="10s")
    handle = prepare(sink, [1, 2, 3])
    service.throttle(1, 429, "3600")
    with pytest.raises(SinkUnavailableError, match=r"3 request.* not delivered yet.*retry after 3600s"):
        sink.commit(handle)
    assert service.count() == 1  # the first refusal stopped the others
    [detail] = sink.prepared_details("s1")
    keys = [json.loads(line)[0] for line in (tmp_path / "outbox" / "outbox" / f"{handle.txn_id}.jsonl")
            .read_text().splitlines()[1:]]
    assert detail.size == 3 and detail.size_unit == "requests"
    assert "0 acknowledged; unacknowledged keys: " + ", ".join(keys) in detail.holds
    with pytest.raises(ProtocolError, match="delivery has started"):
        sink.abort(handle)
    service.heal()
    assert make(service, tmp_path).commit(handle) is CommitOutcome.COMMITTED
    assert sorted(service.ids()) == [1, 2, 3]


def test_permanent_refusals_become_dead_letters_once_even_across_a_crash(service: HttpService, tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    sink = make(service, tmp_path, ackEvery="100")
    handle = prepare(sink, list(range(10)))
    service.refuse({3, 7}, 400)
    with faultinject.armed("http_before_ack:raise"), pytest.raises(faultinject.InjectedFault):
        sink.commit(handle)  # answered, dead letters written, acknowledgements not: a crash
    with caplog.at_level(logging.WARNING, "twopc.sinks.http"):
        assert make(service, tmp_path).commit(handle) is CommitOutcome.COMMITTED
    letters = sink.dead_letters.read("s1")
    assert sorted(json.loads(x["body"])["id"] for x in letters) == [3, 7]
    assert {x["status"] for x in letters} == {400} and all(x["batch_id"] == 0 for x in letters)
    assert sorted(service.ids()) == [0, 1, 2, 4, 5, 6, 8, 9]
    assert TOKEN not in caplog.text and TOKEN not in json.dumps(letters)


def test_purging_markers_removes_only_the_sink_ids_delivered_batches_below_the_bound(service: HttpService,
                                                                                    tmp_path: Path) -> None:
    sink = make(service, tmp_path)
    kept = [prepare(sink, [10 + b], batch=b) for b in range(3)] + [prepare(sink, [20], sink_id="s2")]
    assert sink.commit_all(kept) == [CommitOutcome.COMMITTED] * 4

    def marked() -> set[tuple[str, int]]:
        names = [Xid.parse(p.name.removesuffix(".json")) for p in (tmp_path / "outbox" / "delivered").iterdir()]
        return {(x.sink_id, x.batch_id) for x in names if x is not None}

    assert marked() == {("s1", 0), ("s1", 1), ("s1", 2), ("s2", 0)}
    assert sink.purge_markers("s1", 2) == 2
    assert marked() == {("s1", 2), ("s2", 0)}
    assert sink.purge_markers("s1", 2) == 0


def test_an_aborted_batch_sends_nothing_and_leaves_nothing(service: HttpService, tmp_path: Path) -> None:
    sink = make(service, tmp_path)
    handle = prepare(sink, [1, 2])
    sink.abort(handle)
    sink.abort(handle)
    assert sink.commit(handle) is CommitOutcome.LOST
    assert service.count() == 0
    assert list((tmp_path / "outbox" / "outbox").iterdir()) == []


def test_a_server_that_ignores_keys_repeats_only_the_unacknowledged_requests(tmp_path: Path) -> None:
    with HttpService(ignore_keys=True) as service:
        sink = make(service, tmp_path, ackEvery="4", maxConcurrency="2")
        handle = prepare(sink, list(range(40)))
        with faultinject.armed("http_before_ack:raise"), pytest.raises(faultinject.InjectedFault):
            sink.commit(handle)  # answers received, their record lost with the "crash"
        box = sink.outboxes.read(handle.txn_id)
        assert box is not None
        acked = sink.outboxes.acknowledged(handle.txn_id) or {}
        unacknowledged = [r[0] for i, r in enumerate(box.requests) if i not in acked]
        [detail] = sink.prepared_details("s1")  # what `twopc status` shows of the batch in doubt
        assert detail.size == len(unacknowledged)
        assert f"unacknowledged keys: {', '.join(unacknowledged[:10])}" in detail.holds
        assert make(service, tmp_path).commit(handle) is CommitOutcome.COMMITTED
        twice = {k for k, n in service.applied.items() if n > 1}
        assert set(service.ids()) == set(range(40))
        assert twice and twice <= set(unacknowledged)


def test_tls_is_verified_by_default_a_ca_bundle_trusts_a_server_and_off_is_warned(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cert, key = self_signed(str(tmp_path))
    with HttpService(tls=(cert, key)) as service:
        strict = make(service, tmp_path, maxRetries="0")
        handle = prepare(strict, [1])
        with pytest.raises(SinkUnavailableError, match=r"not delivered yet.*ConnectError.*CERTIFICATE_VERIFY_FAILED"):
            strict.commit(handle)
        assert make(service, tmp_path, tlsCaBundle=cert).commit(handle) is CommitOutcome.COMMITTED
        insecure = make(service, tmp_path, tlsVerify="false")
        with caplog.at_level(logging.WARNING, "twopc.sinks.http"):
            insecure.validate(rows([1]).schema)
        assert "TLS verification is off" in caplog.text and "TLS verification OFF" in insecure.describe()
        assert service.ids() == [1]


def test_credentials_reach_no_outbox_handle_record_or_error(service: HttpService, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TWOPC_TEST_HTTP_KEY", "envKey-Zq81s")
    sink = make(service, tmp_path, token=TOKEN)
    handle = prepare(sink, [1])
    box = (tmp_path / "outbox" / "outbox" / f"{handle.txn_id}.jsonl").read_text()
    options = {"url": f"{service.url}/o/{{id}}", "outbox": "/x", "apiKeyHeader": "X-Api-Key",
               "apiKeyEnv": "TWOPC_TEST_HTTP_KEY"}
    recorded = HttpSink.reopen_options({**options, "token2": TOKEN})
    for text in (box, dumps_handle(handle), sink.describe(), repr(sink), repr(sink.options), json.dumps(recorded)):
        assert TOKEN not in text and "envKey-Zq81s" not in text
    assert "apiKeyEnv" not in recorded  # the operator gives it again, with the other secrets
    keyed = HttpSink.from_options({**options, "outbox": str(tmp_path / "o2"), "maxRetries": "0"})
    service.stop()
    with pytest.raises(SinkUnavailableError) as caught:
        keyed.commit(prepare(keyed, [1]))
    assert "envKey-Zq81s" not in str(caught.value)


def test_twopc_status_shows_a_batch_left_in_doubt_with_its_unacknowledged_keys(service: HttpService,
                                                                               tmp_path: Path) -> None:
    """Through the real coordinator and ledger: the delivery keeps failing, the batch stays
    decided, ``twopc status`` (sink_status) reports it in doubt with its keys, and the next
    commit (a restart's recovery) delivers it."""
    sink = make(service, tmp_path, maxRetries="1")
    ledger = CommitLedger(str(tmp_path / "ck"))
    handles = [prepare(sink, [1, 2], partition=0), prepare(sink, [3], partition=1)]
    service.fail(10**6, 503)
    with pytest.raises(CommitPendingError):
        CommitCoordinator(sink, ledger, "s1", retry=CommitRetry(0, 0)).commit_batch(0, handles)
    status = sink_status(sink, CommitLedger(str(tmp_path / "ck"), read_only=True), "s1")
    assert status.in_doubt_batches == (0,) and status.needs_operator
    assert {t.state for t in status.transactions} == {"in-doubt"}
    text = status.render()
    assert "unacknowledged keys:" in text and "requests" in text
    service.heal()
    RecoveryCoordinator(make(service, tmp_path), ledger, sink_id="s1").run()
    assert sorted(service.ids()) == [1, 2, 3] and sink.list_prepared("s1") == []
