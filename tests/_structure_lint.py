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

Run: ``python -m tests._structure_lint twopc sinks`` (prints each finding as ``path:line: rule``).
It exits 1 on any reach into a part's privates, and on more forwarding methods than
:data:`FORWARDING_LEFT`, the ones not yet taken out: lower it as they go (its goal is 0), and
``make lint`` holds the line meanwhile.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

#: Forwarding methods left in twopc/ and sinks/ on 2026-11-29 (most are the SQL sinks' contract
#: methods passing the call to their writer or committer). More than this fails.
FORWARDING_LEFT = 16

FORWARD = "forwarding method"
REACH = "reaches into a part's private member"


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


def findings(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
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
    over = len(forwarding) > FORWARDING_LEFT
    for where, what in reaches + (forwarding if over else []):
        print(f"{where}: {what}")
    print(f"{len(reaches)} reaches into a part's private members (allowed: 0), {len(forwarding)} forwarding "
          f"methods (allowed: {FORWARDING_LEFT}{': hand the part out, or let the part be the object' if over else ''})")
    return 1 if reaches or over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
