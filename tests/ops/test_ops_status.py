"""``twopc status`` and ``twopc recover`` as an operator runs them after a real crash: a
streaming query SIGKILLed right after it recorded batch 0's decision (``after_decision``),
against real PostgreSQL, MariaDB (XA) and Redis. Status shows the batch in doubt with each
transaction's partition and age and exits 1; recover finishes it; status then shows nothing
unsettled and exits 0, and every row is in the target exactly once."""

from __future__ import annotations

import json
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import sqlalchemy as sa
from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.pandas.types import from_arrow_schema

from twopc import CommitCoordinator, CommitLedger, TwoPhaseCommitDataSource, faultinject
from twopc.sinks import FileSink, JdbcDataSource, PostgresDataSource
from twopc.sinks._secrets import credential_free
from twopc.testing import SinkHarness

from tests._filesink_helpers import crash_commit, run_task
from tests._kit_harnesses import harness_for
from tests._ops_helpers import crash_query_once, twopc_cli


@pytest.fixture(params=["postgres", "mysql_xa", "redis"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SinkHarness]:
    with harness_for(request.param, request, tmp_path) as h:
        yield h


def test_status_shows_a_batch_killed_after_its_decision_until_recover_finishes_it(
        harness: SinkHarness, tmp_path: Path) -> None:
    ids = list(range(int(time.time()) % 100_000 * 100, int(time.time()) % 100_000 * 100 + 12))
    ck = crash_query_once(harness, tmp_path / "job", "after_decision@batch=0:crash", ids=ids, partitions=2)
    ledger = CommitLedger(str(ck))
    decision = ledger.decision(0)
    assert decision is not None and ledger.pending() == [decision]
    sink_id = ledger.recorded_sink_id()
    assert sink_id is not None
    where = ["--checkpoint", str(ck), "--format", harness.sink_path()]

    table = twopc_cli("status", *where, options=harness.sink_options())
    assert table.returncode == 1, table.stdout + table.stderr
    rows = [line.split() for line in table.stdout.splitlines() if line.startswith("in-doubt")]
    assert {r[-1] for r in rows} == decision.txn_ids, table.stdout
    assert "batches decided but not committed (in doubt): [0]" in table.stdout
    assert "needs an operator" in table.stdout

    report = twopc_cli("status", "--json", *where, options=harness.sink_options())
    assert report.returncode == 1, report.stderr
    status = json.loads(report.stdout)
    assert status["sink_id"] == sink_id and status["in_doubt_batches"] == [0]
    assert status["last_decided_batch"] == 0 and status["last_committed_batch"] is None
    txns = status["transactions"]
    assert {t["txn_id"] for t in txns} == decision.txn_ids and {t["state"] for t in txns} == {"in-doubt"}
    assert sorted(t["partition_id"] for t in txns) == sorted(h.partition_id for h in decision.handles)
    assert all(t["batch_id"] == 0 and t["age_seconds"] is not None and t["age_seconds"] >= 0 for t in txns), txns
    assert status["headroom"] is not None and status["headroom"]["in_use"] >= len(txns), status["headroom"]
    assert not set(harness.read_ids()) & set(ids), "rows of the in-doubt batch are visible before recover"

    done = twopc_cli("recover", *where, options=harness.sink_options())
    assert done.returncode == 0, done.stderr
    assert "finished batches [0]" in done.stdout

    after = twopc_cli("status", "--json", *where, options=harness.sink_options())
    assert after.returncode == 0, after.stdout + after.stderr
    settled = json.loads(after.stdout)
    assert settled["transactions"] == [] and settled["in_doubt_batches"] == []
    assert settled["last_committed_batch"] == 0
    assert sorted(harness.read_ids()) == sorted(ids)
    if harness.verify is not None:
        harness.verify(sink_id)


def test_status_lists_orphans_and_the_file_sinks_sizes(tmp_path: Path) -> None:
    """An orphan (prepared, named by no decision) needs an operator too; the file sink tells
    each prepared file's size and age."""
    sink = FileSink(str(tmp_path / "out"))
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id(None, default="job1")
    handles = [run_task(sink, "job1", 0, p, p, [p]) for p in range(2)]
    CommitCoordinator(sink, ledger, "job1").commit_batch(0, handles)
    orphan = run_task(sink, "job1", 1, 0, 9, [100])
    where = ["--checkpoint", str(tmp_path / "ck"), "--format", "twopc-file"]
    out = twopc_cli("status", "--json", *where, options={"path": str(tmp_path / "out")})
    assert out.returncode == 1, out.stderr
    (txn,) = json.loads(out.stdout)["transactions"]
    assert (txn["state"], txn["txn_id"], txn["batch_id"], txn["attempt_id"]) == ("orphan", orphan.txn_id, 1, 9)
    assert txn["size"] > 0 and txn["size_unit"] == "bytes" and txn["age_from"] == "target"
    assert twopc_cli("recover", *where, options={"path": str(tmp_path / "out")}).returncode == 0
    assert twopc_cli("status", *where, options={"path": str(tmp_path / "out")}).returncode == 0


def test_python_m_recovery_status_is_the_same_command(tmp_path: Path) -> None:
    import subprocess
    import sys

    sink = FileSink(str(tmp_path / "out"))
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id(None, default="job1")
    handles = [run_task(sink, "job1", 0, 0, 0, [1])]
    crash_commit(CommitCoordinator(sink, ledger, "job1"), "after_decision", 0, handles, tmp_path / "f")
    out = subprocess.run([sys.executable, "-m", "twopc.recovery", "status", "--checkpoint", str(tmp_path / "ck"),
                          "--format", "twopc-file", "--option", f"path={tmp_path / 'out'}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "in-doubt" in out.stdout, out.stdout + out.stderr


_STATUS_IMPORTS = """
import contextlib, io, json, sys
from twopc.recovery._cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(sys.argv[1:])
print(json.dumps({"code": code, "table": out.getvalue(), "pyarrow": "pyarrow" in sys.modules}))
"""


def test_status_of_a_checkpoint_in_a_local_folder_does_not_load_pyarrow(tmp_path: Path) -> None:
    """Nothing of a local checkpoint needs pyarrow (about 0.15 s of an operator's command)."""
    import subprocess
    import sys

    sink = FileSink(str(tmp_path / "out"))
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id(None, default="job1")
    CommitCoordinator(sink, ledger, "job1").commit_batch(0, [run_task(sink, "job1", 0, 0, 0, [1])])
    out = subprocess.run([sys.executable, "-c", _STATUS_IMPORTS, "status", str(tmp_path / "ck"), "--format",
                          "twopc-file", "--option", f"path={tmp_path / 'out'}"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["code"] == 0 and "last committed batch: 0" in report["table"], report["table"]
    assert report["pyarrow"] is False


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every folder (None) and file (its bytes) under *root*, by relative path."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def test_status_and_recover_of_a_checkpoint_that_is_not_there_exit_3_and_create_nothing(tmp_path: Path) -> None:
    """A mistyped checkpoint path, or a Spark checkpoint without a twopc ledger, is not "nothing
    to recover": both commands exit 3 (nothing can be told) and create nothing."""
    (tmp_path / "out").mkdir()
    (tmp_path / "spark-only").mkdir()
    (tmp_path / "spark-only" / "metadata").write_text('{"id":"q"}')
    before = _tree(tmp_path)
    for command in ("status", "recover"):
        for where in (["--checkpoint", str(tmp_path / "typo")], [str(tmp_path / "typo" / "ck")]):
            out = twopc_cli(command, *where, "--format", "twopc-file", options={"path": str(tmp_path / "out")})
            assert out.returncode == 3, (command, out.stdout, out.stderr)
            assert "there is no twopc checkpoint at" in out.stderr and "does not exist" in out.stderr, out.stderr
            assert "nothing to" not in out.stdout
        other = twopc_cli(command, str(tmp_path / "spark-only"), "--format", "twopc-file",
                          options={"path": str(tmp_path / "out")})
        assert other.returncode == 3 and "a Spark checkpoint without a twopc ledger" in other.stderr, other.stderr
    assert _tree(tmp_path) == before


def test_status_and_a_dry_run_write_nothing_to_the_checkpoint_or_the_target(tmp_path: Path) -> None:
    """A batch in doubt and an orphan, in a ledger whose empty folders are gone (as a copy to
    object storage and back leaves it): status and recover --dry-run change no byte and create
    no folder; recover then finishes the batch."""
    sink = FileSink(str(tmp_path / "out"))
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id(None, default="job1")
    handles = [run_task(sink, "job1", 0, p, p, [p]) for p in range(2)]
    crash_commit(CommitCoordinator(sink, ledger, "job1"), "after_decision", 0, handles, tmp_path / "f")
    run_task(sink, "job1", 1, 0, 9, [100])
    for folder in ("committed", "verdicts", "aborted"):  # owners/ holds the crashed coordinator's claim
        (tmp_path / "ck" / "twopc" / folder).rmdir()
    where = ["--checkpoint", str(tmp_path / "ck"), "--format", "twopc-file"]
    options = {"path": str(tmp_path / "out")}
    before = _tree(tmp_path)
    assert twopc_cli("status", *where, options=options).returncode == 1
    assert twopc_cli("status", "--json", *where, options=options).returncode == 1
    dry = twopc_cli("recover", "--dry-run", *where, options=options)
    assert dry.returncode == 0 and "batches to finish:        [0]" in dry.stdout, dry.stdout + dry.stderr
    assert _tree(tmp_path) == before
    assert twopc_cli("recover", *where, options=options).returncode == 0
    assert twopc_cli("status", *where, options=options).returncode == 0


SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.string()), ("amount", pa.float64())])
#: Per harness: an option naming another target than the harness's.
OTHER_TARGET = {"file": ("path", "elsewhere"), "postgres": ("dbtable", "public.not_this_one"),
                "redis": ("hashTag", "not-this-one")}


def _secrets(options: dict[str, str]) -> dict[str, str]:
    """What an operator gives with --option-env: the password (an option, or the URL's)."""
    if options.get("password"):
        return {"password": options["password"]}
    url_password = urllib.parse.urlsplit(options.get("url", "")).password
    return {"password": url_password} if url_password else {}


@pytest.mark.parametrize("name", sorted(OTHER_TARGET))
def test_status_and_recover_need_only_the_secrets_and_refuse_another_format_or_target(
        name: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The Spark runtime records the query's format and its writer options without secrets in
    the checkpoint (planned as in Spark's planning worker, JVM-less): `twopc status <checkpoint>`
    with only the password finds the batch in doubt. Another format (Redis on a PostgreSQL
    checkpoint), an option naming another target or another sink id exit 3, naming both."""
    with harness_for(name, request, tmp_path) as harness:
        ck = tmp_path / "ck"
        ds = harness.data_source()
        writer = ds({**harness.sink_options(), "checkpointLocation": str(ck)}).streamWriter(
            from_arrow_schema(SCHEMA), False)
        sid = writer.sink_id
        for text in (p.read_text(errors="replace") for p in ck.rglob("*") if p.is_file()):
            assert not any(secret in text for secret in harness.secret_strings()), "a secret in the checkpoint"
        record = json.loads((ck / "twopc" / "target.json").read_text())
        assert record["data_source"] == ds.name() and "password" not in {k.lower() for k in record["options"]}
        messages: list[WriterCommitMessage | None] = [
            writer.write_partition(iter([harness.rows([p * 10 + i for i in range(3)])]), 0, p, p)
            for p in range(2)]
        with faultinject.armed("after_decision@batch=0:raise", state_dir=str(tmp_path / "faults")), \
                pytest.raises(faultinject.InjectedFault):
            writer.commit(messages, 0)
        decision = CommitLedger(str(ck), read_only=True).decision(0)
        assert decision is not None
        secrets = _secrets(harness.sink_options())

        table = twopc_cli("status", str(ck), options=secrets)
        assert table.returncode == 1, table.stdout + table.stderr
        rows = [line.split() for line in table.stdout.splitlines() if line.startswith("in-doubt")]
        assert {r[-1] for r in rows} == decision.txn_ids, table.stdout

        wrong = "twopc-redis" if name != "redis" else "twopc-postgres"
        other_format = twopc_cli("status", str(ck), "--format", wrong, options=secrets)
        assert other_format.returncode == 3, other_format.stdout + other_format.stderr
        assert f"written with format {ds.name()!r}" in other_format.stderr and repr(wrong) in other_format.stderr
        key, value = OTHER_TARGET[name]
        value = str(tmp_path / value) if name == "file" else value
        other_target = twopc_cli("status", str(ck), "--option", f"{key}={value}", options=secrets)
        assert other_target.returncode == 3, other_target.stdout + other_target.stderr
        assert f"belongs to a write to [{record['target']}]" in other_target.stderr, other_target.stderr
        other_id = twopc_cli("status", str(ck), "--sink-id", "someone-else", options=secrets)
        assert other_id.returncode == 3 and f"belongs to sink id {sid!r}" in other_id.stderr, other_id.stderr

        done = twopc_cli("recover", str(ck), options=secrets)
        assert done.returncode == 0 and "finished batches [0]" in done.stdout, done.stdout + done.stderr
        assert twopc_cli("status", str(ck), options=secrets).returncode == 0
        assert sorted(harness.read_ids()) == [0, 1, 2, 10, 11, 12]
        if harness.verify is not None:
            harness.verify(sid)


@pytest.mark.parametrize("form", ["userinfo", "query"])
def test_no_password_of_the_url_reaches_the_checkpoint_and_status_takes_it_back(
        form: str, postgres_url: str, pg_engine: sa.Engine, tmp_path: Path) -> None:
    """A password in the URL (``user:pw@host``, or a JDBC URL's ``?password=``) is cut out of
    the options the checkpoint records; the operator gives it back with --option-env."""
    url = sa.make_url(postgres_url)
    assert url.password
    table = f"st_{uuid.uuid4().hex[:10]}"
    with pg_engine.begin() as c:
        c.exec_driver_sql(f"CREATE TABLE {table} (id bigint NOT NULL, payload text, amount double precision)")
    try:
        where = f"{url.host}:{url.port}/{url.database}"
        ds: type[TwoPhaseCommitDataSource]
        if form == "userinfo":
            ds, options = PostgresDataSource, {"url": f"postgresql://{url.username}:{url.password}@{where}"}
        else:
            ds, options = JdbcDataSource, {"url": f"jdbc:postgresql://{where}?user={url.username}&password="
                                                  f"{url.password}&connectTimeout=10"}
        ck = tmp_path / "ck"
        ds({**options, "dbtable": table, "checkpointLocation": str(ck)}).streamWriter(from_arrow_schema(SCHEMA), False)
        files = [p for p in ck.rglob("*") if p.is_file()]
        assert files and not [p for p in files if url.password in p.read_text(errors="replace")]
        recorded = json.loads((ck / "twopc" / "target.json").read_text())["options"]
        assert recorded["url"] == (f"postgresql://{url.username}@{where}" if form == "userinfo"
                                   else f"jdbc:postgresql://{where}?user={url.username}"), recorded
        out = twopc_cli("status", str(ck), options={"password": url.password})
        assert out.returncode == 0 and "ok: nothing needs an operator" in out.stdout, out.stdout + out.stderr
        refused = twopc_cli("status", str(ck))
        assert refused.returncode == 2 and url.password not in refused.stderr, refused.stderr
    finally:
        with pg_engine.begin() as c:
            c.exec_driver_sql(f"DROP TABLE IF EXISTS {table}")


def test_credential_free_keeps_no_form_of_a_password() -> None:
    """The forms a password takes in options, including raw ``/`` and ``@`` in a URL's user
    info (the option is then left out whole rather than cut wrong)."""
    cases = {
        "postgresql://u:p%40ss@h:5432/db": "postgresql://u@h:5432/db",
        "redis://:s3cret@h:6379/0": "redis://h:6379/0",
        "rediss://h:6379/0?password=s3cret&x=1": "rediss://h:6379/0",
        "jdbc:mysql://h/db?user=u&sslpassword=s3cret": "jdbc:mysql://h/db?user=u",
        "mysql://u:a@b@h/db": "mysql://u@h/db",
        "redis://default:se/cret@h:6379/0": None,
        "mysql://u:a/b@c@h/db": None,
    }
    for url, kept in cases.items():
        out = credential_free({"url": url, "dbtable": "t", "password": "s3cret", "apiToken": "t0ken", "user": "u"})
        assert out.get("url") == kept and out["dbtable"] == "t" and out["user"] == "u", (url, out)
        assert "password" not in out and "apiToken" not in out


def test_redis_options_on_a_postgres_checkpoint_that_records_only_its_target_exit_3(
        redis_url: str, tmp_path: Path) -> None:
    """A checkpoint of an older twopc records its target but not its format: the target alone
    refuses Redis options on a PostgreSQL checkpoint (which said "no unsettled transactions")."""
    ledger = CommitLedger(str(tmp_path / "ck"))
    ledger.bind_sink_id(None, default="job1")
    ledger.bind_target("postgresql 127.0.0.1:5432/shop table public.events", "job1")
    mapping = json.dumps([{"op": "INCRBY", "key": "{t}:total", "by": 1}])
    out = twopc_cli("status", str(tmp_path / "ck"), "--format", "twopc-redis",
                    options={"url": redis_url, "mapping": mapping})
    assert out.returncode == 3, out.stdout + out.stderr
    assert "belongs to a write to [postgresql 127.0.0.1:5432/shop table public.events]" in out.stderr
    assert "but this write goes to [redis 127.0.0.1:" in out.stderr and "no unsettled" not in out.stdout
    alone = twopc_cli("status", str(tmp_path / "ck"))
    assert alone.returncode == 2 and "--format is required" in alone.stderr, alone.stderr


def test_status_of_an_s3_checkpoint_writes_no_object_not_even_a_probe(s3_server: str, tmp_path: Path) -> None:
    """On S3 a reader writes nothing either: not the probe object a writer's first use of a
    bucket puts and deletes (a versioned bucket keeps every version and delete marker)."""
    import boto3

    s3 = boto3.client("s3")
    bucket = f"ro-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    sink = FileSink(str(tmp_path / "out"))
    ck = f"s3://{bucket}/jobs/ck"
    ledger = CommitLedger(ck)
    ledger.bind_sink_id(None, default="job1")
    handles = [run_task(sink, "job1", 0, p, p, [p]) for p in range(2)]
    crash_commit(CommitCoordinator(sink, ledger, "job1"), "after_decision", 0, handles, tmp_path / "f")

    def versions() -> list[tuple[str, str]]:
        page = s3.list_object_versions(Bucket=bucket)
        return sorted((v["Key"], v["VersionId"]) for v in page.get("Versions", []) + page.get("DeleteMarkers", []))

    before = versions()
    options = {"path": str(tmp_path / "out")}
    assert twopc_cli("status", ck, "--format", "twopc-file", options=options).returncode == 1
    missing = twopc_cli("status", f"s3://{bucket}/jobs/typo", "--format", "twopc-file", options=options)
    assert missing.returncode == 3 and "there is no twopc checkpoint at" in missing.stderr, missing.stderr
    assert versions() == before
