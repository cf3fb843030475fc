"""The prepared-transaction sink of PostgreSQL and MySQL XA, and its parts: writer, committer, marker table."""
