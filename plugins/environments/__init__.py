"""rlvr's built-in environments: ``single_turn`` (the default), ``tools``, ``reasoning_gym``,
and the adapters ``verifiers`` (a verifiers 0.4 environment), ``openenv`` (an OpenEnv
environment) and ``trl_env`` (a TRL ``environment_factory`` class).

Laid out as every plugin family is: this module holds the hook and one ``register(...)`` per
environment; the params models are in :mod:`rlvr.plugins.environments.params`; each
environment is a module of its own, named by its ``LazyFactory``. An environment is what an
episode talks to (:class:`rlvr.plugin.EnvironmentImpl`): rlvr renders, samples and tokenizes, the
environment answers each assistant message with messages of its own.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from rlvr._builtin import check_function, check_tool
from rlvr.plugin import Environment, LazyFactory, hookimpl
from rlvr.plugins.environments.params import (
    SCORE_ANSWER,
    TASK_FIELDS,
    OpenEnvParams,
    ReasoningGymEnvParams,
    SingleTurnParams,
    ToolsParams,
    TrlEnvParams,
    VerifiersParams,
)

OPENENV_HINT = "the openenv environment needs OpenEnv: pip install 'rlvr[openenv]' (openenv-core)"


def _openenv_code(params: OpenEnvParams) -> str | None:
    return params.environment


def _openenv_rewards(params: OpenEnvParams) -> tuple[str, ...]:
    return (params.reward_name,)


def _trl_env_code(params: TrlEnvParams) -> str | None:
    return params.factory


def _tools_code(params: ToolsParams) -> str | None:
    return ", ".join(params.user_functions()) or None


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
            description="the model calls Python functions as tools (a calculator built in; "
            "yours as 'module:function' with --allow-code) until it answers without a call",
            rewards=_no_rewards,
            runs_code=_tools_code,
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
    register(
        Environment(
            name="verifiers",
            params=VerifiersParams,
            factory=LazyFactory("rlvr.plugins.environments.verifiers:VerifiersEnvironment"),
            description="a verifiers 0.4 environment by its taskset id; its harness calls rlvr's "
            "model through an OpenAI-compatible endpoint (needs rlvr[verifiers])",
        )
    )
    register(
        Environment(
            name="openenv",
            params=OpenEnvParams,
            factory=LazyFactory("rlvr.plugins.environments.openenv:OpenEnvEnvironment"),
            description="an OpenEnv environment (reset/step), at a server's url or run in "
            "process; the assistant text is the action, the observation the reply",
            runs_code=_openenv_code,
            rewards=_openenv_rewards,
        )
    )
    register(
        Environment(
            name="trl_env",
            params=TrlEnvParams,
            factory=LazyFactory("rlvr.plugins.environments.trl_env:TrlEnvironment"),
            description="a class written for TRL's environment_factory, unchanged: its "
            "methods are the tools, reset() the start, get_reward() a reward",
            runs_code=_trl_env_code,
        )
    )


@hookimpl
def rlvr_validate_config(config: Any) -> list[tuple[str, str]]:
    """Cheap checks of the entries: ``reasoning_gym``'s feedback turns fit in ``max_turns``;
    the adapters' package is installed, and the module or file they name defines the class;
    each function of ``tools`` exists and its signature can be described to the model (all
    read, not imported: the run imports them)."""
    env = getattr(config, "environment", None)
    params = getattr(env, "params", None)
    problems = []
    if isinstance(params, ReasoningGymEnvParams) and env is not None:
        need = params.feedback_turns + 1
        if env.max_turns < need:
            problems.append(
                (
                    "environment.max_turns",
                    f"{env.max_turns} turns leave no room for feedback_turns="
                    f"{params.feedback_turns} (an answer, then one per retry); set "
                    f"environment.max_turns: {need}",
                )
            )
    if isinstance(params, OpenEnvParams):
        if importlib.util.find_spec("openenv") is None:
            problems.append(("environment.name", OPENENV_HINT))
        for key in ("environment", "action_class"):
            spec = getattr(params, key)
            problem = check_function(spec) if spec else None
            if problem:
                problems.append((f"environment.params.{key}", problem))
    if isinstance(params, ToolsParams):
        for i, entry in enumerate(params.tools):
            problem = check_tool(entry) if ":" in entry else None
            if problem:
                problems.append((f"environment.params.tools[{i}]", problem))
    if isinstance(params, TrlEnvParams):
        problem = check_function(params.factory)
        if problem:
            problems.append(("environment.params.factory", problem))
    return problems


__all__ = ["rlvr_register_environments", "rlvr_validate_config"]
