"""``python -m sinks.sql._lease_holder``: hold one writer's lease (a session lock, see
:mod:`sinks.sql._target_ledger`) for its driver.

Reads one line on stdin (the sink's options, never on the command line), takes the lock
without waiting, and answers on stdout ``held <session id>`` or ``busy`` (or ``error
<kind>``). Holding, it ends when it receives SIGTERM (the write's commit or abort ended),
when the driver process it works for is gone, or when it is killed; its session ends with
it, and the server releases the lock.
"""

from __future__ import annotations

import base64
import os
import pickle
import signal
import sys
import time
from typing import Any

from twopc._owner import provably_dead

from ._engines import engine_for
from ._target_ledger import _lock_sql

POLL_SECONDS = 0.2


def _stop(_signum: int, _frame: Any) -> None:
    """End now: the kernel closes the session's socket and the server frees the lock (a normal
    exit would wait for the driver's statement-deadline thread)."""
    os._exit(0)


def main() -> int:
    signal.signal(signal.SIGTERM, _stop)
    cfg = pickle.loads(base64.b64decode(sys.stdin.readline()))
    options, dialect, sink_id, driver = cfg["options"], cfg["dialect"], cfg["sink_id"], cfg["driver"]
    try_lock, _unlock, key = _lock_sql(dialect, sink_id, options.url.database or "")
    try:
        conn = engine_for(options.url, options.net_timeouts(), autocommit=True).raw_connection()
        with conn.driver_connection.cursor() as cur:  # type: ignore[union-attr]  # a checked-out connection has its DB-API connection
            cur.execute(try_lock, (key,))
            got = bool(cur.fetchone()[0])
            cur.execute("SELECT pg_backend_pid()" if dialect == "postgresql" else "SELECT CONNECTION_ID()")
            session = int(cur.fetchone()[0])
    except Exception as exc:  # noqa: BLE001 - any failure is answered by kind only (a driver's message may name the login)
        print("error", type(exc).__name__, flush=True)
        return 2
    if not got:
        print("busy", flush=True)
        return 1
    print("held", session, flush=True)
    sys.stdout.close()
    while not provably_dead(driver):
        time.sleep(POLL_SECONDS)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
