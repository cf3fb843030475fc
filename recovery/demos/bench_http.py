"""``python -m twopc.recovery.demos.bench_http``: twopc-http delivering 20,000 requests, against plain
at-least-once async sends with the same client, concurrency, requests and service.

twopc-http runs through the sink's API (4 outboxes, then ``commit_all`` with ``maxConcurrency``
16); plain sends the same requests from 16 workers through one ``httpx.AsyncClient``. The
``Idempotency-Key`` service runs in a process of its own. Target: twopc-http / plain >= 0.8."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from typing import Any

from ._bench_common import module_parser

__all__ = ["main"]

CONCURRENCY = 16


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stored: dict[str, bytes]) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length, key = 0, None
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
                elif name.lower() == b"idempotency-key":
                    key = value.strip().decode()
            if length:
                await reader.readexactly(length)
            answer = stored.get(key) if key else None
            if answer is None:
                answer = json.dumps({"key": key, "applied": len(stored) + 1}).encode()
                if key:
                    stored[key] = answer
            writer.write(b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(answer), answer))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


def _serve(ports: Any) -> None:
    async def run() -> None:
        stored: dict[str, bytes] = {}
        server = await asyncio.start_server(lambda r, w: _handle(r, w, stored), "127.0.0.1", 0)
        ports.put(server.sockets[0].getsockname()[1])
        async with server:
            await server.serve_forever()
    asyncio.run(run())


def _rows(first: int, n: int) -> Any:
    import pyarrow as pa
    ids = list(range(first, first + n))
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "payload": [f"event {i}" for i in ids],
                            "amount": pa.array([i * 0.5 for i in ids], pa.float64())})


def bench_sink(url: str, first: int, n: int, partitions: int) -> float:
    """Seconds for twopc-http to prepare *n* rows in *partitions* outboxes and deliver them."""
    from twopc import TransactionContext
    from twopc.sinks import HttpSink
    with tempfile.TemporaryDirectory(prefix="twopc-bench-http-") as folder:
        sink = HttpSink.from_options({"url": f"{url}/orders/{{id}}", "outbox": folder,
                                      "maxConcurrency": str(CONCURRENCY)})
        sink_id = f"bench{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        handles = []
        step = n // partitions
        for p in range(partitions):
            txn = sink.begin_transaction(TransactionContext(sink_id, 0, p, p + 1))
            sink.invoke_batch(txn, _rows(first + p * step, step if p < partitions - 1 else n - p * step))
            handles.append(sink.pre_commit(txn))
        sink.commit_all(handles)
        return time.perf_counter() - started


def bench_plain(url: str, first: int, n: int) -> float:
    """Seconds to send the same requests at least once (httpx's async client, same pool and workers)."""
    import httpx
    rows = _rows(first, n).to_pylist()
    async def run() -> float:
        todo = list(reversed(rows))
        limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
        async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(30.0, connect=10.0)) as client:
            async def worker() -> None:
                while todo:
                    row = todo.pop()
                    body = json.dumps(row, separators=(",", ":"), ensure_ascii=False).encode()
                    r = await client.post(f"{url}/orders/{row['id']}", content=body,
                                          headers={"Idempotency-Key": uuid.uuid4().hex,
                                                   "Content-Type": "application/json"})
                    r.raise_for_status()
            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
            return time.perf_counter() - started
    return asyncio.run(run())


def main(argv: Sequence[str] | None = None) -> int:
    parser = module_parser("bench_http", __doc__)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=4, help="task attempts (outboxes) the rows are split into")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    ports: Any = multiprocessing.get_context("spawn").Queue()
    server = multiprocessing.get_context("spawn").Process(target=_serve, args=(ports,), daemon=True)
    server.start()
    try:
        url = f"http://127.0.0.1:{ports.get(timeout=60)}"
        print(f"bench: {args.requests} requests, {args.partitions} outboxes, concurrency {CONCURRENCY}; "
              f"an asyncio Idempotency-Key service in its own process")
        bench_sink(url, 10**9, 500, 2)  # warm-up: imports, the first connections
        bench_plain(url, 2 * 10**9, 500)
        sink_s, plain_s = [], []
        for k in range(args.repeats):  # interleaved, so drift hits both alike
            first = (k + 1) * 10**7
            sink_s.append(bench_sink(url, first, args.requests, args.partitions))
            plain_s.append(bench_plain(url, first + 5 * 10**6, args.requests))
        sink_rate = args.requests / statistics.median(sink_s)
        plain_rate = args.requests / statistics.median(plain_s)
        print(f"  twopc-http (outboxes, delivery, acknowledgements)  {sink_rate:>10,.0f} requests/s")
        print(f"  plain async sends, at least once                   {plain_rate:>10,.0f} requests/s")
        print(f"  ratio twopc-http / plain                           {sink_rate / plain_rate:>10.2f}x")
        from ._bench_results import record
        record("http.vs_plain_async", sink_rate / plain_rate,
               f"{sink_rate:,.0f} / {plain_rate:,.0f} requests/s, median of {args.repeats}")
        return 0
    finally:
        server.terminate()
        server.join(10)


if __name__ == "__main__":
    raise SystemExit(main())
