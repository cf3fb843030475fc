"""Serving :mod:`twopc.operations._metrics`' figures to Prometheus: the scrape-time collector,
:func:`register_metrics` and :func:`serve_metrics`. The only module importing
``prometheus_client`` (a write records figures without it)."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from .._errors import LedgerError
from ..ledger._ledger import CommitLedger
from ._metrics import CHECKPOINT_GAUGES, COUNTERS, GAUGES, HISTOGRAMS, KNOWN_LABELS, failing_batch, load_state

__all__ = ["MetricsCollector", "register_metrics", "serve_metrics"]

log = logging.getLogger("twopc.metrics")


class MetricsCollector(Collector):
    """Prometheus collector of the sinks of some checkpoints, read at every scrape.

    Args:
        checkpoints: checkpoint locations, or a callable returning them (per scrape).
        checkpoint_gauges_only: serve only :data:`CHECKPOINT_GAUGES` (in-doubt gauges, last commit
            time), so ``twopc metrics`` beside a query's own server serves no counter twice."""

    def __init__(self, checkpoints: Sequence[str] | Any, *, checkpoint_gauges_only: bool = False) -> None:
        self._checkpoints = checkpoints
        self._only_gauges = checkpoint_gauges_only

    def collect(self) -> Iterator[Metric]:
        labels = ["sink_id", "format"]
        counters = {n: CounterMetricFamily(f"twopc_{n}", doc, labels=labels + ([lab] if lab else []))
                    for n, (doc, lab) in COUNTERS.items() if not self._only_gauges}
        hists = {n: HistogramMetricFamily(f"twopc_{n}", doc, labels=labels)
                 for n, (_b, doc) in HISTOGRAMS.items() if not self._only_gauges}
        gauges = {n: GaugeMetricFamily(f"twopc_{n}", doc, labels=labels + ([lab] if lab else []))
                  for n, (doc, lab) in GAUGES.items() if n in CHECKPOINT_GAUGES or not self._only_gauges}
        now = time.time()
        for location in list(c() if callable(c := self._checkpoints) else c):
            try:
                ledger = CommitLedger(location, read_only=True)  # a scrape creates nothing, not even a folder
                state = load_state(ledger)
                pending = ledger.pending()
                sink_id = state["labels"].get("sink_id") or ledger.recorded_sink_id() or ""
                # before the first commit, the target record's format labels a batch in doubt
                format_name = state["labels"].get("format") or ((r := ledger.target_record()) and r.data_source) or ""
            except (LedgerError, OSError) as exc:
                log.warning("twopc: cannot read metrics of %s: %s", location, exc)
                continue
            base = [sink_id, str(format_name)]
            for name, family in counters.items():
                values = {**dict.fromkeys(KNOWN_LABELS.get(name, ("",)), 0), **state["counters"].get(name, {})}
                for label, value in sorted(values.items()):
                    family.add_metric(base + ([label] if COUNTERS[name][1] else []), float(value))
            for name, hist in hists.items():
                if (h := state["histograms"].get(name)) is not None:
                    bounds = [*map(str, HISTOGRAMS[name][0]), "+Inf"]
                    counts = map(float, itertools.accumulate(h["counts"]))
                    hist.add_metric(base, list(zip(bounds, counts, strict=True)), float(h["sum"]))
            gauges["in_doubt_transactions"].add_metric(base, float(sum(len(d.handles) for d in pending)))
            gauges["oldest_in_doubt_seconds"].add_metric(
                base, max((now - d.decided_at for d in pending if d.decided_at > 0), default=0.0))
            if state.get("last_commit"):
                gauges["last_commit_timestamp_seconds"].add_metric(base, float(state["last_commit"]))
            failing = failing_batch(state)
            gauges["batch_failed_attempts"].add_metric([*base, str(failing[0] if failing else "")],
                                                       float(failing[1] if failing else 0))
            room = state.get("headroom")
            if room and "target_prepared_transactions" in gauges:
                counted = [*base, str(room["what"])]
                gauges["target_prepared_transactions"].add_metric(counted, float(room["in_use"]))
                if room.get("limit") is not None:
                    gauges["target_prepared_transactions_limit"].add_metric(counted, float(room["limit"]))
        yield from counters.values()
        yield from hists.values()
        yield from gauges.values()


def register_metrics(registry: CollectorRegistry, *checkpoint_locations: str) -> MetricsCollector:
    """Register a collector of *checkpoint_locations* into *registry* (e.g.
    ``prometheus_client.REGISTRY``); return it."""
    collector = MetricsCollector(list(checkpoint_locations))
    registry.register(collector)
    return collector


def serve_metrics(port: int, *checkpoint_locations: str, addr: str = "127.0.0.1") -> CollectorRegistry:
    """Serve *checkpoint_locations* on ``http://addr:port/metrics`` from a daemon thread of this
    long-lived process (*addr*: loopback by default, ``0.0.0.0`` for all); return the registry.

    Raises:
        OSError: the port cannot be bound."""
    registry = CollectorRegistry()
    register_metrics(registry, *checkpoint_locations)
    start_http_server(port, addr=addr, registry=registry)
    return registry
