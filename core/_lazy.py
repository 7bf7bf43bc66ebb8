"""The lazy exports (PEP 562) of the modules that gather names: ``rlvr``, ``rlvr.plugin`` and
``rlvr._builtin``. A name resolves on first use, so ``from rlvr.plugin import hookimpl, Reward``
loads no torch and a script that never trains never imports the trainer."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_getattr(
    module: str, exports: dict[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``name`` from ``exports[name]`` on first use and
    keeps it in ``namespace`` (the module's globals), so the next use is a plain lookup."""

    def __getattr__(name: str) -> Any:
        source = exports.get(name)
        if source is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value
        return value

    return __getattr__
