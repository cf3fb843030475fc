"""The MariaDB/MySQL sink: one XA transaction per task attempt (the prepared mode of
``twopc-jdbc`` on MySQL/MariaDB).

Needs PyMySQL: ``pip install 'twopc[mysql]'``.
"""

from twopc.spi import require as _require

_require("pymysql", "mysql", "the MariaDB/MySQL sink")

from ._sink import MySqlXaHandle, MySqlXaSink  # noqa: E402 - after the driver check

__all__ = ["MySqlXaHandle", "MySqlXaSink"]
