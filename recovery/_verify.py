"""Exactly-once verification of a PostgreSQL table, Jepsen set-checker style."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa

__all__ = ["Verification", "verify_postgres_ids"]


@dataclass(frozen=True)
class Verification:
    """Expected ids against the ids found.

    ``lost``: expected but missing. ``unexpected``: found but never written.
    ``duplicates``: ids found more than once. ``dangling``: prepared transactions of the
    sink still in ``pg_prepared_xacts``.
    """

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

        rows = [
            ("rows expected", str(self.expected)),
            ("rows found", str(self.found)),
            ("duplicates", few(self.duplicates)),
            ("lost", few(self.lost)),
            ("unexpected", few(self.unexpected)),
            ("dangling prepared transactions", few(self.dangling)),
        ]
        width = max(len(k) for k, _ in rows)
        lines = [f"  {k:<{width}}  {v}" for k, v in rows]
        lines.append("  verdict: " + ("EXACTLY ONCE" if self.ok else "VIOLATED"))
        return "\n".join(lines)


def verify_postgres_ids(engine: sa.Engine, table: str, expected_ids: Iterable[int], *,
                        sink_id: str | None, id_column: str = "id") -> Verification:
    """Compare the ids in *table* with *expected_ids* and list the sink's dangling
    prepared transactions (all of ``twopc:`` when *sink_id* is None)."""
    expected = sorted(set(expected_ids))
    prep = engine.dialect.identifier_preparer
    tbl = ".".join(prep.quote(p) for p in table.split("."))
    col = prep.quote(id_column)
    prefix = f"twopc:{sink_id}:" if sink_id else "twopc:"
    with engine.connect() as conn:
        counts: dict[int, int] = dict(conn.execute(sa.text(f"SELECT {col}, count(*) FROM {tbl} GROUP BY {col}")).all())
        dangling = [r[0] for r in conn.execute(sa.text(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
            "AND starts_with(gid, :p)"), {"p": prefix})]
    found_ids = set(counts)
    return Verification(
        expected=len(expected),
        found=sum(counts.values()),
        distinct=len(found_ids),
        duplicates=tuple(sorted(i for i, n in counts.items() if n > 1)),
        lost=tuple(i for i in expected if i not in found_ids),
        unexpected=tuple(sorted(found_ids - set(expected))),
        dangling=tuple(sorted(dangling)),
    )
