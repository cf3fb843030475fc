"""The PostgreSQL sink: ``PREPARE TRANSACTION`` per task attempt, loaded with binary COPY
from Arrow (``format("twopc-postgres")``, and the prepared mode of ``twopc-jdbc``).

Needs psycopg 3: ``pip install 'pyspark-twopc[postgres]'``. The package loads without it (the
shared SQL layer reads PostgreSQL's dialect, :mod:`twopc.sinks.postgres._dialect`, to parse
options); its sink names the extra when it is first read.
"""

from typing import TYPE_CHECKING

from twopc.spi import require as _require

if TYPE_CHECKING:
    from .._sources import PostgresDataSource
    from ._sink import PostgresHandle, PostgresSink

__all__ = ["PostgresDataSource", "PostgresHandle", "PostgresSink"]


def __getattr__(name: str) -> object:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _require("psycopg", "postgres", "the PostgreSQL sink (twopc-postgres)")
    from .._sources import PostgresDataSource
    from ._sink import PostgresHandle, PostgresSink

    found: dict[str, object] = {"PostgresDataSource": PostgresDataSource, "PostgresHandle": PostgresHandle,
                             "PostgresSink": PostgresSink}
    return found[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
