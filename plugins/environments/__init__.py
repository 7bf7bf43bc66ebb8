"""rlvr's built-in environments: ``single_turn`` (the default), ``tools`` and
``reasoning_gym``.

Laid out as every plugin family is: this module holds the hook and one ``register(...)`` per
environment; the params models are in :mod:`rlvr.plugins.environments.params`; each
environment is a module of its own, named by its ``LazyFactory``. An environment is what an
episode talks to (:class:`rlvr.EnvironmentImpl`): rlvr renders, samples and tokenizes, the
environment answers each assistant message with messages of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlvr import Environment, LazyFactory, hookimpl
from rlvr.plugins.environments.params import (
    SCORE_ANSWER,
    TASK_FIELDS,
    ReasoningGymEnvParams,
    SingleTurnParams,
    ToolsParams,
)


def _no_rewards(params: Any) -> tuple[str, ...]:
    return ()


def _score_answer(params: ReasoningGymEnvParams) -> tuple[str, ...]:
    return (SCORE_ANSWER,)


def _task_source(params: ReasoningGymEnvParams) -> dict[str, Any]:
    """The rows: ``data.reasoning_gym`` made of the task fields (one generator, one split)."""
    return {"reasoning_gym": params.model_dump(mode="json", include=set(TASK_FIELDS))}


@hookimpl
def rlvr_register_environments(register: Callable[[Environment], None]) -> None:
    register(
        Environment(
            name="single_turn",
            params=SingleTurnParams,
            factory=LazyFactory("rlvr.plugins.environments.single_turn:SingleTurnEnvironment"),
            description="one completion per prompt, scored by the rewards (the default)",
            multi_turn=False,
            rewards=_no_rewards,
        )
    )
    register(
        Environment(
            name="tools",
            params=ToolsParams,
            factory=LazyFactory("rlvr.plugins.environments.tools:ToolsEnvironment"),
            description="the model calls Python functions as tools (a calculator built in) "
            "until it answers without a call",
            rewards=_no_rewards,
        )
    )
    register(
        Environment(
            name="reasoning_gym",
            params=ReasoningGymEnvParams,
            factory=LazyFactory("rlvr.plugins.environments.reasoning_gym:ReasoningGymEnvironment"),
            description="a reasoning-gym task by name: its generator gives the rows (as "
            "data.reasoning_gym), its score_answer the reward score_answer; feedback_turns "
            "lets the model retry. Needs rlvr[reasoning-gym].",
            rewards=_score_answer,
            data=_task_source,
        )
    )


@hookimpl
def rlvr_validate_config(config: Any) -> list[tuple[str, str]]:
    """``reasoning_gym``: its feedback turns fit in the entry's ``max_turns``."""
    env = getattr(config, "environment", None)
    params = getattr(env, "params", None)
    if not isinstance(params, ReasoningGymEnvParams) or env is None:
        return []  # not ours
    need = params.feedback_turns + 1
    if env.max_turns < need:
        return [
            (
                "environment.max_turns",
                f"{env.max_turns} turns leave no room for feedback_turns="
                f"{params.feedback_turns} (an answer, then one per retry); set "
                f"environment.max_turns: {need}",
            )
        ]
    return []


__all__ = ["rlvr_register_environments", "rlvr_validate_config"]
