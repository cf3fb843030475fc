"""The MariaDB/MySQL sink: one XA transaction per task attempt (the prepared mode of
``twopc-jdbc`` on MySQL/MariaDB).

Needs PyMySQL: ``pip install 'pyspark-twopc[mysql]'``. The package loads without it (the shared
SQL layer reads MariaDB/MySQL's dialect, :mod:`twopc.sinks.mysql._dialect`, to parse options);
its sink names the extra when it is first read.
"""

from typing import TYPE_CHECKING

from twopc.spi import require as _require

if TYPE_CHECKING:
    from ._sink import MySqlXaHandle, MySqlXaSink

__all__ = ["MySqlXaHandle", "MySqlXaSink"]


def __getattr__(name: str) -> object:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _require("pymysql", "mysql", "the MariaDB/MySQL sink")
    from ._sink import MySqlXaHandle, MySqlXaSink

    found: dict[str, object] = {"MySqlXaHandle": MySqlXaHandle, "MySqlXaSink": MySqlXaSink}
    return found[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
