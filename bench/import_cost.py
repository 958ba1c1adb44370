"""`python -m bench.import_cost [STEAD ARGS...]`, e.g. `python -m bench.import_cost runs ls`

The CPU time each module's own code takes to import while one `stead`
command runs in this process, largest first. `python -X importtime` misses
what `importlib.import_module` imports (the lazy names of `stead` and
`stead.records`, PEP 562), whose cost it charges to whoever asked; this
times every module's `exec_module`, less the modules it imported meanwhile.
Run it with `STEAD_DATABASE_URL` naming a migrated database; it prints the
largest 40 (`BENCH_IMPORT_ROWS=N` for N)."""

from __future__ import annotations

import collections
import contextlib
import importlib.abc
import importlib.machinery
import os
import runpy
import sys
import time
import types
from collections.abc import Sequence
from typing import Any

own: collections.defaultdict[str, float] = collections.defaultdict(float)
_stack: list[str] = []


class _Timing(importlib.abc.MetaPathFinder):
    """Finds as the other finders do, and times the loader's exec."""

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is None:
                continue
            loader: Any = spec.loader
            if loader is not None and hasattr(loader, "exec_module"):
                inner = loader.exec_module

                def exec_module(module: types.ModuleType, inner: Any = inner,
                                name: str = name) -> None:
                    _stack.append(name)
                    began = time.process_time()
                    try:
                        inner(module)
                    finally:
                        spent = time.process_time() - began
                        _stack.pop()
                        own[name] += spent
                        if _stack:
                            own[_stack[-1]] -= spent

                loader.exec_module = exec_module
            return spec
        return None


def main(argv: list[str]) -> None:
    sys.meta_path.insert(0, _Timing())
    began = time.process_time()
    sys.argv = ["stead", *argv]
    with contextlib.suppress(SystemExit):  # a command's exit ends its run, not this one
        runpy.run_module("stead", run_name="__main__")
    total = time.process_time() - began
    out = sys.stderr
    print(f"\n{total * 1000:.1f} ms of CPU in all; imports {sum(own.values()) * 1000:.1f} ms "
          "(each module's own, largest first; the standard library by package):", file=out)
    grouped: collections.defaultdict[str, float] = collections.defaultdict(float)
    for name, spent in own.items():
        grouped[name if name.startswith("stead") else name.split(".")[0]] += spent
    rows = int(os.environ.get("BENCH_IMPORT_ROWS", "40"))
    for name, spent in sorted(grouped.items(), key=lambda item: -item[1])[:rows]:
        print(f"{spent * 1000:7.2f}  {name}", file=out)


if __name__ == "__main__":
    main(sys.argv[1:])
