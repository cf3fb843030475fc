"""The prepared-transaction base of the PostgreSQL and MySQL XA sinks: writer, committer, sink."""
