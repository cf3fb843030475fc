"""SQLite through Python's sqlite3: the staging commit mode of ``twopc-jdbc`` (SQLite has no
prepared transactions). The folder registers its dialect (:mod:`twopc.sinks.sqlite._dialect`)
as an entry point; nothing else in twopc names SQLite."""
