"""``python -m twopc.faultinject points``: list the declared fault points."""

from __future__ import annotations

import sys

from . import declared_points


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["points"]:
        print("usage: python -m twopc.faultinject points", file=sys.stderr)
        return 2
    for name, description in sorted(declared_points().items()):
        print(f"{name}\t{description}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
