"""Demos and benchmarks: clients of twopc, sinks and recovery, kept out of the operator package.

Run them as modules (each starts what it needs: a throwaway server, Spark, the chaos runner):

- ``python -m twopc.recovery.demos.stream_demo`` (``make demo``): producers append to Redis Streams
  while a Spark query consumes them into PostgreSQL and Redis counters, crashed over and over,
  then verifies exactly-once (the query is :mod:`twopc.recovery.demos.pipeline`).
- ``python -m twopc.recovery.demos.demo``: the earlier demo, files into PostgreSQL crashed at every
  sink edge. ``... demo job`` is one run of that query, which the demo's chaos runner starts
  and kills.
- ``python -m twopc.recovery.demos.bench``, ``bench_redis``, ``bench_stream`` and ``bench_composite``
  (``make bench``): throughput and protocol cost against Spark's JDBC writer, a raw COPY,
  plain Redis writes and an at-least-once stream pipeline.

Nothing here is imported by ``import recovery``.
"""
