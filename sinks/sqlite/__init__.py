"""SQLite through Python's sqlite3, in ``twopc-jdbc``'s staging mode; its dialect is an entry point."""
