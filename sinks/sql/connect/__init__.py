"""Connections: the per-process engines, their timeouts, the server's identity, SQLite files."""
