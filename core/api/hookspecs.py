"""Every hook an rlvr plugin can implement.

A plugin is a module (or object) named by an entry point in the ``rlvr`` group whose functions
carry the :data:`rlvr.plugin.hookimpl` marker. Hooks receive only keyword arguments; a plugin may
implement any subset of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from rlvr.api.registration import (
        Algorithm,
        Backend,
        Callback,
        DataSource,
        Environment,
        Reward,
    )

hookspec = pluggy.HookspecMarker("rlvr")

#: The one marker every rlvr plugin (built-in or third-party) uses; ``rlvr.plugin.hookimpl``.
hookimpl = pluggy.HookimplMarker("rlvr")


@hookspec
def rlvr_register_rewards(register: Callable[[Reward], None]) -> None:
    """Register reward plugins: call ``register(Reward(name=..., params=..., factory=...))``."""


@hookspec
def rlvr_register_algorithms(register: Callable[[Algorithm], None]) -> None:
    """Register algorithm plugins: call ``register(Algorithm(...))`` once per algorithm."""


@hookspec
def rlvr_register_backends(register: Callable[[Backend], None]) -> None:
    """Register rollout backends: call ``register(Backend(...))`` once per backend."""


@hookspec
def rlvr_register_environments(register: Callable[[Environment], None]) -> None:
    """Register environments (multi-turn, tool-using episodes): call
    ``register(Environment(...))`` once per environment."""


@hookspec
def rlvr_register_callbacks(register: Callable[[Callback], None]) -> None:
    """Register callbacks (objects that observe a run, log it elsewhere, or stop it): call
    ``register(Callback(...))`` once per callback. A run uses those its config names."""


@hookspec
def rlvr_register_data_sources(register: Callable[[DataSource], None]) -> None:
    """Register data sources (where a run's prompts come from): call
    ``register(DataSource(...))`` once per source. A run reads the one ``data.source`` names."""


@hookspec
def rlvr_validate_config(config: Any) -> list[tuple[str, str]] | None:
    """Check a whole, already schema-valid run config for problems no single model can see.

    ``config`` is the validated run config (:func:`rlvr.config.schema.validate` builds it; sections
    as attributes, e.g. ``config.training.num_generations``). Return a list of ``(path, message)``
    pairs, e.g. ``("training.num_generations", "dapo needs at least 2 completions per
    prompt; set training.num_generations >= 2")``, or ``None``/``[]`` when all is well. Runs
    before any model or dataset loads, so it must be cheap.
    """
