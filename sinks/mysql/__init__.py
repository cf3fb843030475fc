"""The MariaDB/MySQL sink: one XA transaction per task attempt (``twopc-jdbc``'s prepared mode on
MySQL/MariaDB). Needs PyMySQL (``pip install 'pyspark-twopc[mysql]'``), which the sink names when first read."""

from typing import TYPE_CHECKING

from twopc.spi import require as _require
from twopc.spi.runtime import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from ._sink import MySqlXaHandle, MySqlXaSink

__all__ = ["MySqlXaHandle", "MySqlXaSink"]

_lazy_getattr, __dir__ = _lazy_exports(__name__, {"MySqlXaHandle": "._sink", "MySqlXaSink": "._sink"})


def __getattr__(name: str) -> object:
    if name in __all__:  # loads on first use, once PyMySQL is there
        _require("pymysql", "mysql", "the MariaDB/MySQL sink")
    return _lazy_getattr(name)
