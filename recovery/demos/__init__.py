"""Demos and benchmarks: clients of twopc, sinks and recovery, run as modules (each starts its throwaway servers, Spark,
the chaos runner): ``stream_demo`` (``make demo``), ``demo`` (files into PostgreSQL crashed at every sink edge), the
``bench*`` modules (``make bench``). Nothing here is imported by ``import twopc.recovery``."""
