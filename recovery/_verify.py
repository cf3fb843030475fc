"""Exactly-once verification of a table, Jepsen set-checker style: :func:`verify_ids` on any SQLAlchemy engine,
:func:`verify_postgres_ids` adding PostgreSQL's dangling prepared transactions, :func:`staged_rows_left` for the staging
mode's leftovers, and :class:`SetCheck`, the bounded form ``twopc verify`` reports."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

#: Stream entry ids per page of ``twopc verify --stream`` (one statement each; about 20 MB at the peak).
PAGE_SIZE = 50_000

__all__ = ["CANNOT_TELL", "CLEAN", "DISCREPANCIES", "EXAMPLES", "PAGE_SIZE", "STAGE_TABLE_PREFIX", "SetCheck",
           "Verification", "staged_rows_left", "verify_ids", "verify_postgres_ids"]

STAGE_TABLE_PREFIX = "twopc_stage_"
"""Default name prefix of the staging tables of ``twopc-jdbc``'s staging mode."""

#: ``twopc verify``'s verdicts (its exit codes; 2, an error, is the CLI's own).
CLEAN, DISCREPANCIES, CANNOT_TELL = 0, 1, 3
#: Examples a :class:`SetCheck` keeps of each kind of discrepancy.
EXAMPLES = 5


@dataclass
class SetCheck:
    """A source's elements against a target's in counts plus at most :data:`EXAMPLES` examples of each kind.

    ``expected``: the source's elements in the range; ``found``: the target's rows in it; ``lost``:
    expected, not found; ``duplicated``: found more than once (``extra_rows`` beyond the first);
    ``unexpected``: found, explained by no expected element; ``not_checked``: counts of rows outside
    what can be judged (reported, not discrepancies); ``cannot_tell``: why a discrepancy cannot be
    told from something legitimate (verdict :data:`CANNOT_TELL` unless lost or duplicated elements
    make it certain)."""

    subject: str
    expected: int = 0
    found: int = 0
    lost: int = 0
    duplicated: int = 0
    extra_rows: int = 0
    unexpected: int = 0
    examples: dict[str, list[str]] = field(default_factory=lambda: {"lost": [], "duplicated": [], "unexpected": []})
    not_checked: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    cannot_tell: list[str] = field(default_factory=list)

    def add_examples(self, kind: str, values: Iterable[Any] | None) -> None:
        """Keep up to :data:`EXAMPLES` of *values* as examples of *kind*."""
        kept = self.examples.setdefault(kind, [])
        kept.extend(str(v) for v in itertools.islice(values or (), max(0, EXAMPLES - len(kept))))

    @property
    def verdict(self) -> int:
        """:data:`CLEAN`, :data:`DISCREPANCIES` or :data:`CANNOT_TELL`."""
        if self.lost or self.duplicated:
            return DISCREPANCIES
        if self.cannot_tell:
            return CANNOT_TELL
        return DISCREPANCIES if self.unexpected else CLEAN

    def to_json(self) -> dict[str, Any]:
        verdict = {CLEAN: "clean", DISCREPANCIES: "discrepancies", CANNOT_TELL: "cannot tell"}[self.verdict]
        return {**dataclasses.asdict(self), "verdict": verdict}

    def render(self) -> str:
        def few(n: int, kind: str) -> str:
            ex = self.examples.get(kind) or []
            return f"{n}" + (f"  e.g. {', '.join(ex)}" if ex else "")
        rows = [("expected", str(self.expected)), ("found", str(self.found)), ("lost", few(self.lost, "lost")),
                ("duplicated", few(self.duplicated, "duplicated")
                 + (f"  ({self.extra_rows} extra row(s))" if self.extra_rows else "")),
                ("unexpected", few(self.unexpected, "unexpected"))]
        rows += [(f"not checked: {k}", str(v)) for k, v in self.not_checked.items()]
        width = max(len(k) for k, _ in rows)
        verdict = {CLEAN: "CLEAN", DISCREPANCIES: "DISCREPANCIES", CANNOT_TELL: "CANNOT TELL"}[self.verdict]
        return "\n".join([self.subject, *(f"  {k:<{width}}  {v}" for k, v in rows),
                          *(f"  note: {n}" for n in self.notes), *(f"  cannot tell: {n}" for n in self.cannot_tell),
                          f"  verdict: {verdict}"])


@dataclass(frozen=True)
class Verification:
    """Expected ids against the ids found: ``lost`` (expected, missing), ``unexpected`` (never written), ``duplicates``
    (found more than once), ``dangling`` (the sink's prepared transactions still in ``pg_prepared_xacts``)."""

    expected: int
    found: int
    distinct: int
    duplicates: tuple[int, ...]
    lost: tuple[int, ...]
    unexpected: tuple[int, ...]
    dangling: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.lost or self.unexpected or self.dangling) and \
            self.found == self.expected

    def render(self) -> str:
        def few(xs: tuple[object, ...]) -> str:
            return f"{len(xs)}" + (f"  e.g. {list(xs[:5])}" if xs else "")
        rows = [("rows expected", str(self.expected)), ("rows found", str(self.found)),
                ("duplicates", few(self.duplicates)), ("lost", few(self.lost)), ("unexpected", few(self.unexpected)),
                ("dangling prepared transactions", few(self.dangling))]
        width = max(len(k) for k, _ in rows)
        verdict = "EXACTLY ONCE" if self.ok else "VIOLATED"
        return "\n".join([*(f"  {k:<{width}}  {v}" for k, v in rows), f"  verdict: {verdict}"])


def verify_postgres_ids(engine: sa.Engine, table: str, expected_ids: Iterable[int], *,
                        sink_id: str | None, id_column: str = "id") -> Verification:
    """Compare the ids in *table* with *expected_ids* and list the sink's dangling
    prepared transactions (all of ``twopc:`` when *sink_id* is None)."""
    with engine.connect() as conn:
        dangling = [r[0] for r in conn.execute(sa.text(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
            "AND starts_with(gid, :p)"), {"p": f"twopc:{sink_id}:" if sink_id else "twopc:"})]
    return dataclasses.replace(verify_ids(engine, table, expected_ids, id_column=id_column),
                               dangling=tuple(sorted(dangling)))


def verify_ids(engine: sa.Engine, table: str, expected_ids: Iterable[int], *, id_column: str = "id") -> Verification:
    """:func:`verify_postgres_ids` on any SQLAlchemy engine, without ``dangling`` (always empty).
    *table* may be ``schema.table``."""
    expected = sorted(set(expected_ids))
    prep = engine.dialect.identifier_preparer
    tbl = ".".join(prep.quote(p) for p in table.split("."))
    col = prep.quote(id_column)
    with engine.connect() as conn:
        counts: dict[int, int] = {int(k): int(n) for k, n in conn.execute(
            sa.text(f"SELECT {col}, count(*) FROM {tbl} GROUP BY {col}")).all()}
    found_ids = set(counts)
    return Verification(expected=len(expected), found=sum(counts.values()), distinct=len(found_ids),
                        duplicates=tuple(sorted(i for i, n in counts.items() if n > 1)),
                        lost=tuple(i for i in expected if i not in found_ids),
                        unexpected=tuple(sorted(found_ids - set(expected))), dangling=())


def staged_rows_left(engine: sa.Engine, *, sink_id: str | None = None,
                     prefix: str = STAGE_TABLE_PREFIX) -> dict[str, int]:
    """``{table: rows}`` left in the staging tables (names starting with *prefix*) of PostgreSQL (every
    schema) or SQLite; with *sink_id* only that sink's rows (``twopc_txn`` starting with
    ``twopc:<sink_id>:``). ValueError for another database."""
    dialect = engine.dialect.name
    like = _like_prefix(prefix)
    prep = engine.dialect.identifier_preparer
    names: list[tuple[str | None, str]]
    with engine.connect() as conn:
        if dialect == "postgresql":
            names = [(s, t) for s, t in conn.execute(sa.text(
                "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE c.relkind IN ('r', 'p') AND c.relname LIKE :p ESCAPE '\\' "
                "AND n.nspname NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2"), {"p": like})]
        elif dialect == "sqlite":
            names = [(None, t) for (t,) in conn.execute(sa.text(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE :p ESCAPE '\\' "
                "ORDER BY name"), {"p": like})]
        else:
            raise ValueError(f"staged_rows_left supports PostgreSQL and SQLite, not {dialect}")
        where = "" if sink_id is None else f" WHERE {prep.quote('twopc_txn')} LIKE :t ESCAPE '\\'"
        params = {} if sink_id is None else {"t": _like_prefix(f"twopc:{sink_id}:")}
        out: dict[str, int] = {}
        for schema, name in names:
            qualified = (f"{prep.quote(schema)}." if schema else "") + prep.quote(name)
            count = conn.execute(sa.text(f"SELECT count(*) FROM {qualified}{where}"), params).scalar_one()
            out[f"{schema}.{name}" if schema else name] = int(count)
    return out


def _like_prefix(text: str) -> str:
    """A LIKE pattern (``ESCAPE '\\'``) matching strings that start with *text*."""
    return text.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%") + "%"
