"""Type rules every SQL mode shares: Arrow type families and what fits a column, nested
values as JSON, matching a DataFrame to a table's columns, DDL for new tables."""
