"""Where the benchmarks leave their ratios for :mod:`twopc.recovery.demos.bench_summary`: one JSON
line per measured ratio, appended to the file named by ``TWOPC_BENCH_RESULTS`` (``make bench``
sets it; without it nothing is written, so a benchmark run by hand leaves no file behind)."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

__all__ = ["RESULTS_ENV", "record", "results_path"]

RESULTS_ENV = "TWOPC_BENCH_RESULTS"


def results_path() -> Path | None:
    """The results file of this run, or None when no summary was asked for."""
    value = os.environ.get(RESULTS_ENV)
    return Path(value) if value else None


def record(key: str, value: float, detail: str = "") -> None:
    """Append one measured ratio (or other judged figure) under *key*, a key of
    :data:`twopc.recovery.demos.bench_summary.TARGETS`; *detail* says what it was measured from
    (medians, runs). The machine's load average at this moment goes with it."""
    path = results_path()
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    line = {"key": key, "value": value, "detail": detail, "load": round(os.getloadavg()[0], 2),
            "at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%SZ")}
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
