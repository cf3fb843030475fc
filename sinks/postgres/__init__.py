"""The PostgreSQL sink: ``PREPARE TRANSACTION`` per task attempt, loaded with binary COPY
from Arrow (``format("twopc-postgres")``, and the prepared mode of ``twopc-jdbc``).

Needs psycopg 3: ``pip install 'pyspark-twopc[postgres]'``.
"""

from twopc.spi import require as _require

_require("psycopg", "postgres", "the PostgreSQL sink (twopc-postgres)")

from .._sources import PostgresDataSource  # noqa: E402 - after the driver check
from ..sql._registry import register as _register  # noqa: E402 - after the driver check
from ._backend import POSTGRES_BACKEND as _BACKEND  # noqa: E402 - after the driver check
from ._sink import PostgresHandle, PostgresSink  # noqa: E402 - after the driver check

_register(_BACKEND)  # the shared SQL layer asks the registry for this dialect

__all__ = ["PostgresDataSource", "PostgresHandle", "PostgresSink"]
