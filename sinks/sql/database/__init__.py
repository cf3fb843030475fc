"""The target database of a SQL sink: a prepared sink's handle on it (``SqlTarget``), the
dialect protocol (``SqlDialect``), the per-process engines, their timeouts, the server's identity."""
