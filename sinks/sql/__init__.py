"""SQL sinks: what every database sink shares, and the ``twopc-jdbc`` drop-in.

- :class:`JdbcSink` (``format("twopc-jdbc")``), :func:`write_jdbc`: the drop-in for Spark's
  JDBC writer, choosing the prepared or the staging commit mode.
- :class:`JdbcOptions`: the one reader of every SQL format's options (Spark's JDBC
  writer options plus twopc's), with :func:`translate_url`, the one URL translator.
- :class:`PreparedSqlSink`: the sink that prepares transactions, made of a target, a
  dialect, a writer and a committer; :class:`twopc.sinks.postgres.PostgresSink` and
  :class:`twopc.sinks.mysql.MySqlXaSink` give it their dialect.
- :class:`StagingSink`: the portable staging mode, for any SQLAlchemy database.

Layout: ``options/`` (the parsed options; their reader: Spark's options, the URL and its
driver parameters), ``types/`` (the type rules every mode shares), ``connect/`` (engines and
their timeouts, a prepared sink's target and the dialect protocol), ``prepared/`` (the
prepared-transaction sink and its writer, committer and marker table), ``staging/`` (the
staging mode), ``_target_ledger`` (the decision ledger in the target), ``_registry`` (what a
database's folder registers),
``_jdbc`` (the drop-in: its options and commit mode), ``_jdbc_modes`` (which of its two
sinks a transaction or handle goes to).

This package needs no database driver and never imports a database's folder: it asks the
dialect registry (:mod:`twopc.sinks.sql._registry`), which imports :mod:`twopc.sinks.postgres` or
:mod:`twopc.sinks.mysql` (each needs its driver: ``pyspark-twopc[postgres]``, ``pyspark-twopc[mysql]``) the first
time that database is used.
"""

from typing import TYPE_CHECKING

from twopc.spi.runtime import lazy_exports as _lazy_exports

if TYPE_CHECKING:
    from .._handles import PreparedSqlHandle, StagingHandle
    from .._sources import JdbcDataSource
    from ._jdbc import JdbcSink
    from ._names import TableName, parse_table_name
    from ._transactional import require_transactional
    from ._write_jdbc import write_jdbc
    from .connect._engines import dispose_engines
    from .options import JdbcOptions
    from .options._jdbc_url import SqlUrl, translate_url
    from .prepared._sink import PreparedSqlSink
    from .staging._sink import StagingSink

__all__ = [
    "JdbcDataSource",
    "JdbcOptions",
    "JdbcSink",
    "PreparedSqlHandle",
    "PreparedSqlSink",
    "SqlUrl",
    "StagingHandle",
    "StagingSink",
    "TableName",
    "dispose_engines",
    "parse_table_name",
    "require_transactional",
    "translate_url",
    "write_jdbc",
]

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
    "PreparedSqlSink": ".prepared._sink",
    "StagingSink": ".staging._sink",
    "dispose_engines": ".connect._engines",
    "require_transactional": "._transactional",
    "write_jdbc": "._write_jdbc",
})
