"""SQL sinks: what every database sink shares, and the ``twopc-jdbc`` drop-in.

- :class:`JdbcSink` (``format("twopc-jdbc")``), :func:`write_jdbc`: the drop-in for Spark's
  JDBC writer, choosing the prepared or the staging commit mode.
- :class:`JdbcOptions`: the one reader of every SQL format's options, with
  :func:`translate_url`, the one URL translator.
- :class:`PreparedSqlSink`: the sink that prepares transactions;
  :class:`twopc.sinks.postgres.PostgresSink` and :class:`twopc.sinks.mysql.MySqlXaSink` give it
  their dialect.
- :class:`StagingSink`: the portable staging mode, for any SQLAlchemy database.

This package needs no database driver and never imports a database's folder: the dialect
registry (:mod:`twopc.sinks.sql._registry`) imports one the first time it is used.
"""

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

#: Every name loads on first use: a worker that commits a prepared write (Spark's commit worker)
#: never imports the staging mode, nor pyarrow through it; one that runs a task loads the
#: modules of its sink's mode only.
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
