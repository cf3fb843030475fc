"""Two structural rules of the product code, checked by ``make lint``:

- **No forwarding method.** A method whose body (its docstring aside) only passes its call on
  to an attribute — ``return self.part.name(...)``, ``self.part.name(...)``, ``return
  self.part.name`` — re-exposes a part instead of letting the caller use it. Hand the part
  out (a capability), or let the part be the object. The call passes its call on when each
  argument is one of the method's parameters, a constant or an attribute of ``self``: a
  method that builds an argument (a tuple of a record, a message, a value computed from its
  own state) does work of its own, and is not counted.
- **No reaching into a part's privates.** ``self.part._name`` uses what another object keeps
  to itself: give that object the method the caller needs.
- **No database name in the shared SQL layer.** A code line of ``sinks/sql`` that compares or
  keys on ``postgresql``, ``mysql``, ``mariadb`` or ``sqlite`` (``==``/``!=``/``in`` tests, dict
  keys, set members, ``with_variant`` arguments; docstrings and comments aside) branches on a
  database: give its dialect (:class:`twopc.sinks.sql._registry.SqlDatabase`) the fact instead.

Run: ``python -m tests._structure_lint twopc sinks`` (prints each finding as ``path:line: rule``).
It exits 1 on any reach into a part's privates, on any forwarding method and on more
database names than :data:`DATABASE_NAMES_LEFT`.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

#: Forwarding methods allowed in twopc/ and sinks/: none (87 when the rule came, the last taken
#: out on 2026-11-29). Any fails.
FORWARDING_LEFT = 0

#: Code in sinks/sql that compares or keys on a database's name: none (a database's knowledge
#: is its dialect class, in its own folder). More than this fails.
DATABASE_NAMES_LEFT = 0

FORWARD = "forwarding method"
REACH = "reaches into a part's private member"
NAMED = "names a database in the shared SQL layer"
#: the databases the shared SQL layer must not name in its code
DATABASES = frozenset({"postgresql", "mysql", "mariadb", "sqlite"})


def _body(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return body


def _on_a_part(node: ast.expr) -> bool:
    """``self.<part>.<name>`` (the part an attribute of self, not self itself)."""
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name) and node.value.value.id == "self")


def _passed_on(node: ast.expr, packed: set[str]) -> bool:
    """Whether an argument is only passed on: a name, a constant, ``self.<x>``, or ``*`` of
    one of those. The tuple (dict) a ``*args`` (``**kwargs``) parameter packs, passed as one
    value, is built by the method: it is not passed on."""
    if isinstance(node, ast.Starred):
        node = node.value
    elif isinstance(node, ast.Name) and node.id in packed:
        return False
    return (isinstance(node, ast.Name | ast.Constant)
            or (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"))


def forwards(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether *fn*'s body is one statement passing the call on to ``self.<part>.<name>``
    (with arguments it only passes on)."""
    body = _body(fn)
    if len(body) != 1:
        return False
    stmt = body[0]
    value = stmt.value if isinstance(stmt, ast.Return | ast.Expr) else None
    if value is None:
        return False
    if isinstance(value, ast.Await):
        value = value.value
    if isinstance(value, ast.Call):
        packed = {a.arg for a in (fn.args.vararg, fn.args.kwarg) if a is not None}
        return _on_a_part(value.func) and all(_passed_on(a, packed) for a in value.args) \
            and all(_passed_on(k.value, packed) if k.arg is not None else isinstance(k.value, ast.Name)
                    for k in value.keywords)
    return _on_a_part(value)


def _names(node: ast.AST | None) -> list[str]:
    """The database names among *node*'s string constants (itself, or a tuple/list/set of them)."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)
            and i.value.lower() in DATABASES]


def database_names(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """The code that compares or keys on a database name: comparisons and ``in`` tests, dict
    keys, set members, ``with_variant`` arguments."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            named = [n for part in (node.left, *node.comparators) for n in _names(part)]
        elif isinstance(node, ast.Dict):
            named = [n for key in node.keys for n in _names(key)]
        elif isinstance(node, ast.Set):
            named = _names(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "with_variant":
            named = [n for arg in node.args for n in _names(arg)]
        else:
            continue
        if named:
            yield node.lineno, f"{NAMED}: {', '.join(sorted(set(named)))}"


def findings(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    if "sinks/sql/" in path.as_posix():
        yield from database_names(tree)
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for fn in cls.body:
            if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and forwards(fn):
                yield fn.lineno, f"{FORWARD} {cls.name}.{fn.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                and isinstance(node.value, ast.Attribute) and isinstance(node.value.value, ast.Name) \
                and node.value.value.id == "self":
            yield node.lineno, f"{REACH}: self.{node.value.attr}.{node.attr}"


def main(argv: list[str]) -> int:
    found = [(f"{path}:{line}", what) for root in argv or ["twopc", "sinks"]
             for path in sorted(Path(root).rglob("*.py")) for line, what in findings(path)]
    reaches = [f for f in found if f[1].startswith(REACH)]
    forwarding = [f for f in found if f[1].startswith(FORWARD)]
    named = [f for f in found if f[1].startswith(NAMED)]
    over = len(forwarding) > FORWARDING_LEFT
    too_many = len(named) > DATABASE_NAMES_LEFT
    for where, what in reaches + (forwarding if over else []) + (named if too_many else []):
        print(f"{where}: {what}")
    print(f"{len(reaches)} reaches into a part's private members (allowed: 0), {len(forwarding)} forwarding "
          f"methods (allowed: {FORWARDING_LEFT}{': hand the part out, or let the part be the object' if over else ''})")
    print(f"{len(named)} database names in sinks/sql (allowed: {DATABASE_NAMES_LEFT}"
          f"{': give the dialect the fact (twopc.sinks.sql._registry)' if too_many else ''})")
    return 1 if reaches or over or too_many else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
