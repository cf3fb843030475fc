"""Spark's JDBC writer options as twopc reads them: the options, the URL and its driver
parameters, the timeout rule, column lists."""
