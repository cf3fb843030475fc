"""``python -m twopc.recovery.demos.bench_xa``: one batch's prepared XA transactions on MariaDB/MySQL committed one ``XA
COMMIT`` round trip each against in one query (what :meth:`twopc.sinks.MySqlXaSink.commit_all` does), alternated, on the
same server (a throwaway LocalMariaDB unless ``TWOPC_BENCH_MARIADB_URL`` is set)."""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from collections.abc import Sequence

from ._bench_common import module_parser, run_sql, server_url
from ._bench_results import record

__all__ = ["main"]


def bench_commit(url: str, table: str, transactions: int, *, batched: bool, batch_id: int) -> float:
    """Seconds of ``commit_all`` for *transactions* prepared XA transactions."""
    import pyarrow as pa

    from twopc import CommitOutcome, TransactionContext
    from twopc.sinks import MySqlXaSink
    sink = MySqlXaSink(url, table)
    sink.validate(pa.schema([("id", pa.int64())]))
    if not batched:  # the bench's "before": one XA COMMIT (and one marker lookup) per transaction
        dialect = sink.dialect
        dialect.finish_many = lambda verb, gids, *, recovering: [  # type: ignore[method-assign]  # the bench's "before"
            dialect.finish(verb, gid) for gid in gids]
    sink_id = "bx" + uuid.uuid4().hex[:8]
    handles = []
    for p in range(transactions):
        txn = sink.begin_transaction(TransactionContext(sink_id, batch_id, p, 0))
        sink.invoke_batch(txn, pa.record_batch({"id": pa.array([batch_id * 100_000 + p], pa.int64())}))
        handles.append(sink.pre_commit(txn))
    sink.list_prepared(sink_id)  # opens the control connection outside the timed part
    started = time.perf_counter()
    outcomes = sink.commit_all(handles)
    elapsed = time.perf_counter() - started
    assert outcomes == [CommitOutcome.COMMITTED] * transactions, outcomes
    sink.close()
    return elapsed


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench_xa", __doc__)
    parser.add_argument("--transactions", type=int, default=50, help="prepared XA transactions per batch")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    from twopc.faultinject import LocalMariaDB
    given = os.environ.get("TWOPC_BENCH_MARIADB_URL")
    with server_url(given, LocalMariaDB) as url:
        table = "bench_xa_" + uuid.uuid4().hex[:8]
        run_sql(url, f"CREATE TABLE {table} (id BIGINT PRIMARY KEY) ENGINE=InnoDB")
        print(f"bench: MariaDB XA commit of {args.transactions} prepared transactions (one row each), "
              f"{args.repeats} repeats; {'from TWOPC_BENCH_MARIADB_URL' if given else 'throwaway server'}")
        one, batched = [], []
        for k in range(args.repeats):  # alternated, so drift hits both alike
            one.append(bench_commit(url, table, args.transactions, batched=False, batch_id=2 * k))
            batched.append(bench_commit(url, table, args.transactions, batched=True, batch_id=2 * k + 1))
        a, b = statistics.median(one), statistics.median(batched)
        print(f"  one XA COMMIT round trip per transaction     {a * 1000:>9.1f} ms")
        print(f"  the batch's XA COMMITs in one query          {b * 1000:>9.1f} ms")
        print(f"  ratio one-by-one / batched (speed-up)        {a / b:>9.2f}x")
        record("mariadb.xa_commit_one_by_one_vs_batched", a / b,
               f"{args.transactions} transactions, median of {args.repeats}: {a * 1000:.1f} / {b * 1000:.1f} ms")
        return 0


if __name__ == "__main__":
    sys.exit(main())
