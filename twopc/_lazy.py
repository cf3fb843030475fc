"""A package's names imported on first use (PEP 562), for a package that re-exports many.

Every Spark Python worker of a write imports the packages on its path (``twopc``,
``twopc.sinks``, ``twopc.spi``, ...); each name such a package re-exports is loaded only when
first read, so a worker loads the modules of what it runs and no others. The package keeps
the names under ``if TYPE_CHECKING:`` for type checkers and the import contracts::

    if TYPE_CHECKING:
        from ._errors import SinkError

    __getattr__, __dir__ = lazy_exports(__name__, {"SinkError": "._errors"})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(module: str, names: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package (or module) *module* that serve *names*.

    Args:
        module: the package's ``__name__``, which is being imported.
        names: each lazily loaded name -> where it is: ``"module"`` (absolute, or relative as
            in the package's own imports: ``"._errors"``) defining the same name,
            ``"module:other"`` defining it as ``other``, or ``"module:"`` for that module itself.

    A name read once is stored in the package's namespace: later reads do not call
    ``__getattr__``. ``dir()`` of the package lists the names not yet read too.
    """
    where = dict(names)
    anchor = sys.modules[module].__package__  # what the package's own relative imports start from
    def __getattr__(name: str) -> Any:  # noqa: N807 - the module attribute hook of PEP 562
        spec = where.get(name)
        if spec is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        source_name, _, attribute = spec.partition(":")
        source = importlib.import_module(source_name, anchor)
        value = source if spec.endswith(":") else getattr(source, attribute or name)
        setattr(sys.modules[module], name, value)
        return value
    def __dir__() -> list[str]:  # noqa: N807 - the module attribute hook of PEP 562
        return sorted(set(vars(sys.modules[module])) | set(where))
    return __getattr__, __dir__
