"""The import contract import-linter's built-in types cannot say: twopc's protocol core.

twopc is one import package. Its protocol core is every module of ``twopc`` outside the
packages built on it (``twopc.sinks``, ``twopc.recovery``) and the one below it
(``twopc.faultinject``); the package's own ``__init__`` is the facade and belongs to neither.
:class:`CoreBoundaryContract` (``type = "core_boundary"`` in ``pyproject.toml``) is broken by

- a core module importing a package above it;
- a module of the package below importing anything of the core;
- a module above or below importing a core module that is not public: they import ``twopc``
  and the core's public packages (``public``: ``twopc.spi``, ``twopc.testing``), never a
  private module (``twopc._x``) or a module of the core's own folders (``twopc.ledger``,
  ``twopc.spark``, ``twopc.operations``).

Only direct imports are checked: an indirect chain from the core upward has a direct step
out of the core, and that step is what the contract reports.
"""

from __future__ import annotations

from typing import Any

import grimp
from importlinter import Contract, ContractCheck, fields, output


def _within(module: str, packages: set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


class CoreBoundaryContract(Contract):
    type_name = "core_boundary"

    package = fields.StringField()
    above = fields.SetField(subfield=fields.StringField())
    below = fields.SetField(subfield=fields.StringField())
    public = fields.SetField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        package = str(self.package)
        above = {str(m) for m in self.above}  # type: ignore[attr-defined]  # a SetField's value
        below = {str(m) for m in self.below}  # type: ignore[attr-defined]  # a SetField's value
        public = {str(m) for m in self.public}  # type: ignore[attr-defined]  # a SetField's value

        def is_core(module: str) -> bool:
            return module.startswith(package + ".") and not _within(module, above | below)

        def is_private_core(module: str) -> bool:
            return is_core(module) and not _within(module, public)

        broken: list[dict[str, Any]] = []
        for importer in sorted(graph.modules):
            if not importer.startswith(package + "."):
                continue
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                if is_core(importer) and _within(imported, above):
                    why = "the core imports a package built on it"
                elif _within(importer, below) and (is_core(imported) or imported == package):
                    why = "the package below the core imports it"
                elif _within(importer, above | below) and is_private_core(imported):
                    why = "a private core module imported from outside the core (import twopc or twopc.spi)"
                else:
                    continue
                lines = [d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported)]
                broken.append({"importer": importer, "imported": imported, "why": why, "lines": lines})
        return ContractCheck(kept=not broken, metadata={"broken": broken})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for item in check.metadata["broken"]:
            lines = ", ".join(f"l.{n}" for n in item["lines"])
            output.print_error(f"{item['importer']} -> {item['imported']} ({lines}): {item['why']}", bold=False)
            output.new_line()
