"""Demos and benchmarks: clients of twopc, sinks and recovery, kept out of the operator package.

Run them as modules (each starts what it needs: a throwaway server, Spark, the chaos runner):

- ``python -m recovery.demos.demo`` (``make demo``): crash a streaming query into PostgreSQL
  over and over, then verify exactly-once. ``... demo job`` is one run of that query, which the
  demo's chaos runner starts and kills.
- ``python -m recovery.demos.bench`` and ``python -m recovery.demos.bench_redis``
  (``make bench``): throughput and protocol cost against Spark's JDBC writer, a raw COPY and
  plain Redis writes.

Nothing here is imported by ``import recovery``.
"""
