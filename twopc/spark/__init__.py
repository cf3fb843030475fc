"""Spark's side of the protocol: the Python data sources and their writers, the plan of a write
and its commit, and what the runtime does around each micro-batch."""
