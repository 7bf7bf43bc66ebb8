"""rlvr's built-in callbacks: the loggers ``training.report_to`` names.

Laid out as every plugin family is: this module holds the hook and one ``register(...)`` per
callback; each logger is a module of its own, named by its ``LazyFactory`` and imported only
when a run builds it (``rlvr plugins`` loads no logging library). A logger writes what
``metrics.jsonl`` holds, one line per ``on_log``; ``metrics.jsonl`` stays the record.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from rlvr.plugin import Callback, LazyFactory, hookimpl
from rlvr.plugins.callbacks.params import (
    MlflowParams,
    TensorBoardParams,
    TrackioParams,
    WandbParams,
)


def _needs(module: str, pip: str) -> Callable[[], str | None]:
    """``available()`` for a logger whose library is ``module``, installed with ``pip``."""

    def available() -> str | None:
        if importlib.util.find_spec(module) is not None:
            return None
        return f"the {module!r} package is not installed: pip install {pip}"

    return available


@hookimpl
def rlvr_register_callbacks(register: Callable[[Callback], None]) -> None:
    loggers = (
        ("tensorboard", TensorBoardParams, "TensorBoard", "TensorBoard (OUTPUT_DIR/tensorboard)"),
        ("wandb", WandbParams, "Wandb", "Weights & Biases"),
        ("trackio", TrackioParams, "Trackio", "trackio (local-first; `trackio show`)"),
        ("mlflow", MlflowParams, "Mlflow", "MLflow (needs rlvr[mlflow])"),
    )
    for name, params, cls, where in loggers:
        register(
            Callback(
                name=name,
                params=params,
                factory=LazyFactory(f"rlvr.plugins.callbacks.{name}:{cls}"),
                description=f"report_to logger: the metrics to {where}",
                available=_needs(name, f"'rlvr[{name}]'"),
                logger=True,
            )
        )


__all__ = ["rlvr_register_callbacks"]
