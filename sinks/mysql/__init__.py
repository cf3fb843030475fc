"""The MariaDB/MySQL sink: one XA transaction per task attempt (``twopc-jdbc``'s prepared mode on
MySQL/MariaDB). Needs PyMySQL (``pip install 'pyspark-twopc[mysql]'``), which the sink names when first read."""

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
