"""Public names a package imports on first use (PEP 562), so that importing
the package loads none of the modules that hold them: its `__init__` names
the module of each, and `names` gives it the module-level `__getattr__` and
`__dir__` that import one when it is first asked for and keep it.

`stead` itself keeps its own two functions: it also answers its submodules
by name, and `stead --help` imports nothing of stead it does not need."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any


def names(
    package: str, where: Mapping[str, str], namespace: MutableMapping[str, Any],
    exported: Sequence[str], other: Callable[[str], Any] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`, whose name `n` lives in the
    module `where[n]`. `namespace` is the package's `globals()`: a name
    imported once is kept there, so the next use is an ordinary attribute
    read and `__getattr__` is not called again. `other` answers a name that
    `where` lacks (else `AttributeError`)."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            if other is not None:
                return other(name)
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exported})

    return __getattr__, __dir__
