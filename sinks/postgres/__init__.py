"""The PostgreSQL sink: ``PREPARE TRANSACTION`` per task attempt, loaded with binary COPY from Arrow
(``format("twopc-postgres")``, and ``twopc-jdbc``'s prepared mode). Needs psycopg 3 (``pip install
'pyspark-twopc[postgres]'``), which the sink names when first read."""

from typing import TYPE_CHECKING

from twopc.spi import require as _require
from twopc.spi.runtime import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from .._sources import PostgresDataSource
    from ._sink import PostgresHandle, PostgresSink

__all__ = ["PostgresDataSource", "PostgresHandle", "PostgresSink"]

_lazy_getattr, __dir__ = _lazy_exports(__name__, {"PostgresDataSource": "twopc.sinks._sources",
                                                  "PostgresHandle": "._sink", "PostgresSink": "._sink"})


def __getattr__(name: str) -> object:
    if name in __all__:  # each name loads on first use (the one asked for only), once psycopg is there
        _require("psycopg", "postgres", "the PostgreSQL sink (twopc-postgres)")
    return _lazy_getattr(name)
