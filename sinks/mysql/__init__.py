"""The MariaDB/MySQL sink: one XA transaction per task attempt (the prepared mode of
``twopc-jdbc`` on MySQL/MariaDB).

Needs PyMySQL: ``pip install 'pyspark-twopc[mysql]'``.
"""

from twopc.spi import require as _require

_require("pymysql", "mysql", "the MariaDB/MySQL sink")

from ..sql._registry import register as _register  # noqa: E402 - after the driver check
from ._backend import MYSQL_BACKEND as _BACKEND  # noqa: E402 - after the driver check
from ._sink import MySqlXaHandle, MySqlXaSink  # noqa: E402 - after the driver check

_register(_BACKEND)  # the shared SQL layer asks the registry for this dialect

__all__ = ["MySqlXaHandle", "MySqlXaSink"]
