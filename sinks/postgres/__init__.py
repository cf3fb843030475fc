"""The PostgreSQL sink: ``PREPARE TRANSACTION`` per task attempt, loaded with binary COPY
from Arrow (``format("twopc-postgres")``, and the prepared mode of ``twopc-jdbc``).

Needs psycopg 3: ``pip install 'twopc[postgres]'``.
"""

from twopc.spi import require as _require

_require("psycopg", "postgres", "the PostgreSQL sink (twopc-postgres)")

from .._sources import PostgresDataSource  # noqa: E402 - after the driver check
from ._sink import PostgresHandle, PostgresSink  # noqa: E402 - after the driver check

__all__ = ["PostgresDataSource", "PostgresHandle", "PostgresSink"]
