"""Each package's public names, pinned: a name joins or leaves a package's API on purpose.

For every package: ``__all__`` is exactly its row below, holds no name twice and no private
name, is sorted the way ruff's RUF022 sorts it (isort-style: CONSTANTS, then Classes, then
functions), every name in it resolves, and every public name the package's ``__init__``
defines (``dir()``, which also lists faultinject's lazily loaded names) is in it.
Submodules and the ``from __future__ import annotations`` / ``TYPE_CHECKING`` imports are
not names a package defines.

``twopc`` has two surfaces: its package, what a pipeline calls, and ``twopc.spi``, what sink
authors import beyond that (with ``twopc.spi.lease``, ``.runtime`` and ``.operations`` for
twopc's own packages). Each name of either is documented in its module's docstring, no name
is on two of them, and none has more than 30 names.
"""

import importlib
import typing
from types import ModuleType

import pytest

# ---------------------------------------------------------------------------------------------
# The table.  sinks/ is being reorganised: its engineer owns its row and its deviations.
# ---------------------------------------------------------------------------------------------
PUBLIC_NAMES: dict[str, tuple[str, ...]] = {
    "twopc": (
        "CommitCoordinator", "CommitLedger", "CommitOutcome", "CommitShape",
        "ConfigurationError",
        "FencedError", "LedgerError", "MissingExtraError", "Participant", "RecoveryCoordinator", "SinkError",
        "SinkStatus", "TransactionContext", "TransactionHandle", "TransactionLostError", "TwoPCError",
        "TwoPhaseCommitDataSource", "TwoPhaseCommitSink", "UnsettledTransaction", "Xid",
        "check_checkpoint_location", "composite", "data_source_for", "foreach_batch_writer", "register",
        "register_all", "register_metrics", "serve_metrics", "sink_status", "write_jdbc",
    ),
    "twopc.spi": (
        "BatchAbortedError", "BatchCommit", "CommitPendingError", "ConcurrentWriterError",
        "DecisionHook", "HandleError", "HandleVersionError", "Headroom", "Inspectable", "LedgerHost",
        "MarkerPurge", "MissingOptionError", "NamedTarget", "OwnerRecord", "PreparedDetail", "ProtocolError",
        "SchemaMismatchError", "SinkUnavailableError", "SourceError", "TargetConfigurationError",
        "TargetMismatchError", "UnknownHandleKindError", "WriteSetup", "capability", "make_folder", "option",
        "redact", "require", "validate_sink_id",
    ),
    "twopc.spi.lease": (
        "EPHEMERAL_PREFIX", "DriverAgent", "DriverIdentity", "Lease", "TargetLedger", "TargetRecord", "ask_agent",
        "check_target", "checkpoint_label", "default_sink_id", "driver_identity", "ephemeral_sink_id",
        "ephemeral_started", "ephemeral_writer_dead", "hold_for_prepare", "open_target_ledger", "private_dir",
        "resolve_abandoned", "start_ticks", "target_ledger_of",
    ),
    "twopc.spi.operations": (
        "LOOPBACK", "BatchState", "Decision", "MetricsCollector", "RecoveryPlan", "RecoveryReport",
        "configure_cli_logging", "load_object", "log_event", "open_store", "recover_command",
    ),
    "twopc.spi.runtime": (
        "RUNTIME_KEYS", "RUNTIME_OPTION_NAMES", "BatchResult", "CommitMetrics", "CommitRetry",
        "CompositeDataSourceBase", "CompositeHandle", "CompositeSink", "RuntimeOptions", "TwoPCCommitMessage",
        "TwoPhaseCommitBatchWriter", "TwoPhaseCommitStreamWriter", "decode_handle", "dumps_handle",
        "encode_handle", "lazy_exports", "loads_handle", "note_worker_use", "participant_sink_id",
        "registered_handle_kinds",
    ),
    "twopc.testing": (
        "CONTRACT_CHECKS", "COORDINATOR_CHECKS", "DEFAULT_SCHEMA", "DEFAULT_SPARK_CONF", "DRIVER_CRASH_POINTS",
        "EXECUTOR_POINTS", "FAULT_KINDS", "FAULT_POINTS",
        "PROTOCOL_CHECKS",
        "ChaosTable", "ContractReport", "ContractViolation", "CrashMatrixResult", "CrashMatrixTests", "Fault",
        "HarnessError", "Schedule", "ScheduleResult", "ScheduleTarget",
        "SinkContractTests", "SinkHarness",
        "check_a_wrong_credential_never_shows_in_errors", "check_abort_after_commit_is_refused",
        "check_abort_is_idempotent", "check_commit_is_idempotent", "check_committable_from_a_restarted_driver",
        "check_coordinator_commits_sweeps_and_ignores_replays", "check_driver_crash_then_recovery_is_exactly_once",
        "check_handle_round_trips_without_credentials", "check_invisible_until_commit_then_exactly_once",
        "check_list_prepared_finds_exactly_the_prepared", "check_lost_transaction_is_loud",
        "check_never_prepared_is_lost", "check_rollback_leaves_nothing", "check_rolled_back_is_lost",
        "check_sink_pickles_after_use", "cluster_crash_plan", "crash_plan", "default_rows", "derive_secrets",
        "fresh_nonce", "generate_schedule", "run_contract", "run_crash_matrix", "run_schedule", "shrink_schedule",
    ),
    "twopc.recovery": (
        "RecoveryCoordinator", "RecoveryPlan", "RecoveryReport", "Verification",
        "build_sink", "main", "staged_rows_left", "verify_ids", "verify_postgres_ids",
    ),
    "twopc.faultinject": (
        "ACTIONS", "ENV_CONTROL", "ENV_CRASH_PGID", "ENV_PLAN", "ENV_RUN", "ENV_SPEC", "ENV_STATE", "EXIT_CODE",
        "RELEASE_FILE",
        "Action", "ChaosJobFailed", "ChaosReport", "ChaosRun", "ChaosRunner", "FaultControl", "FaultControlError",
        "FaultPlan", "FaultProxy",
        "FaultRule", "FaultSpecError", "InjectedFault", "LocalMariaDB", "LocalPostgres", "LocalRedis",
        "LocalRedisCluster", "LocalSparkCluster", "LocalSparkConnect",
        "ProxyConnection", "ServerUnavailable", "UnknownFaultPoint",
        "armed", "current_state_dir", "declare", "declared_points", "export_crash_group", "export_run",
        "fault_point", "read_firings",
    ),
    "twopc.sinks": (
        "DATA_SOURCES", "SOURCES",
        "CompositeDataSource", "FileDataSource", "FileHandle", "FileSink", "HIncrByOp", "HSetOp", "HttpDataSource",
        "HttpHandle", "HttpSink", "IncrByOp",
        "JdbcDataSource", "JdbcOptions", "JdbcSink", "MySqlXaHandle", "MySqlXaSink", "OptionsCompositeSink",
        "PostgresDataSource", "PostgresHandle", "PostgresSink", "RPushOp", "RedisDataSource",
        "RedisHandle", "RedisSink", "RedisStreamDataSource", "RedisTargetError", "SetOp",
        "StagingHandle", "StagingSink", "XAddOp", "ZAddOp",
        "parse_mapping", "participant", "register_all", "sink_for_format", "write_jdbc",
    ),
    "twopc.sinks.redis_source": (
        "BASE_DDL", "FAULT_POINTS", "FORMAT_NAME", "LIBRARY_NAME", "OPTIONS",
        "EntryId", "Offset", "Position", "Range", "RedisStreamReader", "StreamOptions",
        "StreamPartition", "StreamServer",
        "check_pyspark", "schema_ddl",
    ),
    "twopc.sinks.sql": (
        "JdbcDataSource", "JdbcOptions", "JdbcSink", "PreparedSqlHandle", "PreparedSqlSink", "SqlUrl",
        "StagingHandle", "StagingSink", "TableName",
        "dispose_engines", "parse_table_name", "require_transactional", "translate_url", "write_jdbc",
    ),
    "twopc.sinks.postgres": ("PostgresDataSource", "PostgresHandle", "PostgresSink"),
    "twopc.sinks.http": ("OPTIONS", "HttpHandle", "HttpOptions", "HttpSink", "checkpoint_outbox"),
    "twopc.sinks.mysql": ("MySqlXaHandle", "MySqlXaSink"),
    "twopc.sinks.redis": (
        "HIncrByOp", "HSetOp", "IncrByOp", "RPushOp", "RedisDataSource", "RedisHandle", "RedisKeys", "RedisOp",
        "RedisSink", "RedisTargetError", "SetOp", "XAddOp", "ZAddOp",
        "dispose_clients", "key_slot", "mapping_json", "parse_mapping",
    ),
}

# Where a package breaks the rules above on purpose.  The test checks each is still so: when
# one is fixed, the test fails until its entry here is deleted.
UNSORTED_ALL: frozenset[str] = frozenset()
NOT_IN_ALL: dict[str, frozenset[str]] = {}
# ---------------------------------------------------------------------------------------------

PACKAGES = sorted(PUBLIC_NAMES)


def _ruff_order(name: str) -> tuple[int, str]:
    """RUF022's isort-style key: SCREAMING_SNAKE_CASE, then CamelCase, then anything else."""
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def _defined_public_names(package: ModuleType) -> set[str]:
    """The public names the package's namespace holds, lazy ones included."""
    out = set()
    for name in dir(package):
        if name.startswith("_"):
            continue
        value = getattr(package, name)
        if isinstance(value, ModuleType) and value.__name__.startswith(package.__name__ + "."):
            continue  # a submodule: not a name the __init__ defines
        if name == "TYPE_CHECKING" and value is typing.TYPE_CHECKING:
            continue
        if name == "annotations" and type(value).__module__ == "__future__":
            continue
        out.add(name)
    return out


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_the_pinned_api(name: str) -> None:
    exported = importlib.import_module(name).__all__
    assert len(exported) == len(set(exported)), f"{name}.__all__ lists a name twice"
    assert set(exported) == set(PUBLIC_NAMES[name])


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted(name: str) -> None:
    exported = list(importlib.import_module(name).__all__)
    is_sorted = exported == sorted(exported, key=_ruff_order)
    if name in UNSORTED_ALL:
        assert not is_sorted, f"{name}.__all__ is sorted now: delete {name!r} from UNSORTED_ALL"
    else:
        assert is_sorted, f"sort {name}.__all__ (ruff check --select RUF022 --fix does)"


@pytest.mark.parametrize("name", PACKAGES)
def test_every_public_name_is_exported_and_nothing_private(name: str) -> None:
    package = importlib.import_module(name)
    exported = set(package.__all__)
    assert not {n for n in exported if n.startswith("_")}
    assert exported <= set(dir(package))
    for member in exported:
        assert hasattr(package, member), member
    leaked = _defined_public_names(package) - exported
    assert leaked == NOT_IN_ALL.get(name, frozenset()), (
        f"{name} defines public names missing from __all__: add them to __all__ (and the table), "
        f"or make them private with a leading underscore")


def test_table_rows_are_in_order() -> None:
    # The rows are kept in __all__'s order so that they read like it.
    for name, row in PUBLIC_NAMES.items():
        assert list(row) == sorted(row, key=_ruff_order), name


# The modules whose docstring documents every name of __all__ (as :class:`X`, :func:`x`, ...).
DOCUMENTED: tuple[str, ...] = ("twopc", "twopc.spi", "twopc.spi.lease", "twopc.spi.operations", "twopc.spi.runtime")


@pytest.mark.parametrize("name", DOCUMENTED)
def test_every_exported_name_is_documented(name: str) -> None:
    module = importlib.import_module(name)
    doc = module.__doc__ or ""
    undocumented = [n for n in module.__all__ if f"`{n}`" not in doc]
    assert not undocumented, f"{name}'s docstring does not document {undocumented}: say in it what each is for"


SPI = ("twopc.spi", "twopc.spi.lease", "twopc.spi.operations", "twopc.spi.runtime")


def test_public_and_provider_surfaces_are_disjoint() -> None:
    # A name is either for the pipeline (twopc) or for sink authors and twopc's packages (one of
    # the twopc.spi modules, split by who imports it).
    for i, name in enumerate(SPI):
        assert set(PUBLIC_NAMES["twopc"]).isdisjoint(PUBLIC_NAMES[name])
        for other in SPI[i + 1:]:
            assert set(PUBLIC_NAMES[name]).isdisjoint(PUBLIC_NAMES[other]), (name, other)


@pytest.mark.parametrize("name", ["twopc", *SPI])
def test_no_provider_module_has_more_than_30_names(name: str) -> None:
    assert len(importlib.import_module(name).__all__) <= 30
