"""rlvr's built-in environments: ``single_turn`` (the default), ``tools`` and
``verifiers`` (an adapter for verifiers 0.4 environments).

Laid out as every plugin family is: this module holds the hook and one ``register(...)`` per
environment; the params models are in :mod:`rlvr.plugins.environments.params`; each
environment is a module of its own, named by its ``LazyFactory``. An environment is what an
episode talks to (:class:`rlvr.EnvironmentImpl`): rlvr renders, samples and tokenizes, the
environment answers each assistant message with messages of its own.
"""

from __future__ import annotations

from collections.abc import Callable

from rlvr import Environment, LazyFactory, hookimpl
from rlvr.plugins.environments.params import SingleTurnParams, ToolsParams, VerifiersParams


@hookimpl
def rlvr_register_environments(register: Callable[[Environment], None]) -> None:
    register(
        Environment(
            name="single_turn",
            params=SingleTurnParams,
            factory=LazyFactory("rlvr.plugins.environments.single_turn:SingleTurnEnvironment"),
            description="one completion per prompt, scored by the rewards (the default)",
            multi_turn=False,
        )
    )
    register(
        Environment(
            name="tools",
            params=ToolsParams,
            factory=LazyFactory("rlvr.plugins.environments.tools:ToolsEnvironment"),
            description="the model calls Python functions as tools (a calculator built in) "
            "until it answers without a call",
        )
    )
    register(
        Environment(
            name="verifiers",
            params=VerifiersParams,
            factory=LazyFactory("rlvr.plugins.environments.verifiers:VerifiersEnvironment"),
            description="a verifiers 0.4 environment by its taskset id; its harness calls rlvr's "
            "model through an OpenAI-compatible endpoint (needs rlvr[verifiers])",
        )
    )


__all__ = ["rlvr_register_environments"]
