"""A package's re-exported names imported on first use (PEP 562), so a Spark worker loads only the
modules of what it runs. The package keeps the names under ``if TYPE_CHECKING:`` too::

    if TYPE_CHECKING:
        from ._errors import SinkError

    __getattr__, __dir__ = lazy_exports(__name__, {"SinkError": "._errors"})"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(module: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` serving *names* for the package *module* (its ``__name__``). Each name
    maps to ``"module"`` (absolute or relative, defining the same name), ``"module:other"``, or ``"module:"`` (the
    module itself). A name read once is stored in the package; ``dir()`` lists the unread ones too."""
    where = dict(names)
    anchor = sys.modules[module].__package__  # what the package's own relative imports start from
    def __getattr__(name: str) -> Any:  # noqa: N807 - the module attribute hook of PEP 562
        if (spec := where.get(name)) is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        source_name, _, attribute = spec.partition(":")
        source = importlib.import_module(source_name, anchor)
        value = source if spec.endswith(":") else getattr(source, attribute or name)
        setattr(sys.modules[module], name, value)
        return value
    def __dir__() -> list[str]:  # noqa: N807 - the module attribute hook of PEP 562
        return sorted(set(vars(sys.modules[module])) | set(where))
    return __getattr__, __dir__
