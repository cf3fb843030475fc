"""SQL sinks: :class:`JdbcSink` and :func:`write_jdbc` (the ``twopc-jdbc`` drop-in), :class:`JdbcOptions`
and :func:`translate_url` (every SQL format's options and URLs), :class:`PreparedSqlSink` (prepared
transactions; the PostgreSQL and MySQL sinks give it their dialect) and :class:`StagingSink` (any
SQLAlchemy database). It imports no driver nor database folder: the dialect registry loads one on first use."""

from typing import TYPE_CHECKING

from twopc.spi.runtime import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from .._handles import PreparedSqlHandle, StagingHandle
    from .._sources import JdbcDataSource
    from ._engines import dispose_engines
    from ._jdbc import JdbcSink
    from ._names import TableName, parse_table_name
    from ._prepared_sink import PreparedSqlSink
    from ._staging_sink import StagingSink
    from ._transactional import require_transactional
    from ._write_jdbc import write_jdbc
    from .options import JdbcOptions
    from .options._jdbc_url import SqlUrl, translate_url

__all__ = ["JdbcDataSource", "JdbcOptions", "JdbcSink", "PreparedSqlHandle", "PreparedSqlSink", "SqlUrl",
           "StagingHandle", "StagingSink", "TableName", "dispose_engines", "parse_table_name", "require_transactional",
           "translate_url", "write_jdbc"]

#: Every name loads on first use: a worker loads only the modules of its sink's mode (a commit, no pyarrow).
__getattr__, __dir__ = _lazy_exports(__name__, {
    **dict.fromkeys(("PreparedSqlHandle", "StagingHandle"), "twopc.sinks._handles"),
    **dict.fromkeys(("TableName", "parse_table_name"), "._names"),
    **dict.fromkeys(("SqlUrl", "translate_url"), ".options._jdbc_url"),
    "JdbcDataSource": "twopc.sinks._sources",
    "JdbcOptions": ".options",
    "JdbcSink": "._jdbc",
    "PreparedSqlSink": "._prepared_sink",
    "StagingSink": "._staging_sink",
    "dispose_engines": "._engines",
    "require_transactional": "._transactional",
    "write_jdbc": "._write_jdbc",
})
