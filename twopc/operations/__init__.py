"""The operator's side of the core: a sink's status, recovery, the writes whose writer died, and metrics."""
