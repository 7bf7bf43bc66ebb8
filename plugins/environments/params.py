"""Params models of the built-in environments: light (pydantic only), imported at registration
and by ``rlvr validate``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationInfo, field_validator, model_validator

from rlvr import create_host
from rlvr._builtin import ReasoningGymConfig, code_spec, tool_name
from rlvr.plugin import Params

#: The tools the ``tools`` environment has built in, by name.
BUILTIN_TOOLS = ("calculator",)


class SingleTurnParams(Params):
    """``single_turn``: no params; the episode is one completion of the dataset prompt."""


def _tool_entry(value: str, info: ValidationInfo) -> str:
    """A built-in tool's name, or a function of the user's as a spec (resolved: a relative
    file against the config's directory)."""
    if ":" not in value:
        if value in BUILTIN_TOOLS:
            return value
        raise ValueError(
            f"unknown built-in tool {value!r} (the built-in tools: {', '.join(BUILTIN_TOOLS)}); "
            "a function of yours is 'module:function' or 'path/to/file.py:function' (run with "
            "--allow-code)"
        )
    return code_spec(value, (info.context or {}).get("config_dir"))


class ToolsParams(Params):
    """``tools``: the model may call the listed tools; an answer without a call ends it."""

    tools: list[Annotated[str, AfterValidator(_tool_entry)]] = Field(
        ["calculator"],
        min_length=1,
        description="the tools offered to the model: built-in ones by name (calculator: + - * / "
        "and parentheses on numbers) and Python functions of yours as 'module:function' or "
        "'path/to/file.py:function' (a relative path from the config's directory; needs "
        "--allow-code). A function's schema comes from its type hints and docstring; the tool's "
        "name is the function's",
    )
    system_prompt: str | None = Field(
        None, description="a system message put first in every episode (after none in the row)"
    )
    max_calls_per_turn: int = Field(
        4,
        ge=1,
        description="most tool calls of one assistant message that are run (the rest get no reply)",
    )

    @field_validator("tools")
    @classmethod
    def _distinct_names(cls, value: list[str]) -> list[str]:
        seen: dict[str, str] = {}
        for entry in value:
            name = tool_name(entry) if ":" in entry else entry
            if name in seen:
                raise ValueError(
                    f"two tools are named {name!r} ({seen[name]!r} and {entry!r}); the model "
                    "calls a tool by its function's name, so each must be distinct"
                )
            seen[name] = entry
        return value

    def user_functions(self) -> list[str]:
        """The functions of the user's that the tools are (the entries that are specs)."""
        return [entry for entry in self.tools if ":" in entry]


class VerifiersParams(Params):
    """``verifiers``: a verifiers 0.4 environment, by its taskset id (an installed package)."""

    env: str = Field(
        min_length=1,
        description="the verifiers taskset id (its installed package, e.g. gsm8k-v1 or "
        "owner/name); its Env (SingleAgentEnv unless the taskset ships one) runs the episodes",
    )
    args: dict[str, Any] = Field(
        default_factory=dict,
        description="the taskset's config fields (what --env.taskset.* sets in vf-eval)",
    )
    harness: dict[str, Any] | None = Field(
        None,
        description="the agent's harness config, e.g. {id: bash} (null: the taskset's own "
        "harness, else verifiers' bash)",
    )
    runtime: dict[str, Any] = Field(
        default_factory=lambda: {"type": "subprocess"},
        description="where the harness runs (verifiers' runtime config; subprocess: on this "
        "host, docker: in a container)",
    )
    task_field: str = Field(
        "task", description="the row field holding the index of the task an episode runs"
    )
    max_tasks: int = Field(
        10_000, ge=1, description="tasks taken from an infinite taskset (a finite one is whole)"
    )


class OpenEnvParams(Params):
    """``openenv``: where the OpenEnv environment is, and how messages map to its actions and
    observations."""

    url: str | None = Field(
        None,
        description="base URL of a running OpenEnv server (http://host:port, ws://...); one "
        "WebSocket session per episode",
    )
    environment: str | None = Field(
        None,
        description="instead of url: 'module:Class' or 'path/to/file.py:Class' of an OpenEnv "
        "Environment run in this process, one instance per episode (runs your code)",
    )
    action_class: str | None = Field(
        None,
        description="with environment: its Action class ('module:Class'); default: read from "
        "the class's Environment[Action, Observation, State] base",
    )
    action_field: str = Field(
        "message", description="the action field that gets the assistant message's text"
    )
    action_extra: dict[str, Any] = Field(
        default_factory=dict, description="fixed fields added to every action"
    )
    observation_field: str | None = Field(
        None,
        description="the observation field whose text becomes the user message; null: the "
        "only text field, else the observation as JSON",
    )
    reset_fields: list[str] = Field(
        default_factory=list,
        description="dataset columns passed to reset() as keyword arguments (seed, a task id)",
    )
    reset_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="fixed keyword arguments of every reset()"
    )
    first_observation: Literal["append", "message", "ignore"] = Field(
        "append",
        description="the reset observation: appended to the prompt's last user message (as "
        "TRL does with reset()'s text), a user message of its own, or not shown",
    )
    tools: bool = Field(
        False,
        description="an MCP environment: its tools (list_tools) are offered to the model, each "
        "tool call is a call_tool action, and an answer without a call ends the episode",
    )
    reward_name: str = Field(
        "openenv", description="the name the environment's reward gets (rewards/<name>/...)"
    )
    reward: Literal["sum", "last"] = Field(
        "sum", description="the episode's reward: the sum of its step rewards, or the last one"
    )
    message_timeout: float = Field(
        60.0, gt=0, description="seconds the client waits for one server reply"
    )

    @field_validator("environment", "action_class")
    @classmethod
    def _check_spec(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else code_spec(value, (info.context or {}).get("config_dir"))

    @model_validator(mode="after")
    def _one_source(self) -> OpenEnvParams:
        if (self.url is None) == (self.environment is None):
            raise ValueError(
                "give exactly one of url (a running OpenEnv server) or environment "
                "('module:Class' of an OpenEnv Environment to run in this process)"
            )
        if self.action_class is not None and self.environment is None:
            raise ValueError("action_class goes with environment (a url's server knows its own)")
        return self


class TrlEnvParams(Params):
    """``trl_env``: a class written for TRL's ``GRPOTrainer(environment_factory=...)``."""

    factory: str = Field(
        description="'module:Class' or 'path/to/file.py:Class': what TRL's environment_factory "
        "would be (called with no arguments; runs your code)"
    )
    system_prompt: str | None = Field(
        None, description="a system message put first in every episode (after none in the row)"
    )
    max_calls_per_turn: int = Field(
        8, ge=1, description="most tool calls of one assistant message that are run"
    )

    @field_validator("factory")
    @classmethod
    def _check_factory(cls, value: str, info: ValidationInfo) -> str:
        return code_spec(value, (info.context or {}).get("config_dir"))


class ReasoningGymEnvParams(Params, ReasoningGymConfig):
    """``reasoning_gym``: a reasoning-gym task as the episodes' source and judge.

    The task's fields are ``data.reasoning_gym``'s (task, params, seed, train_size, eval_size,
    eval_share, template): the environment hands them to ``data:`` (one generator and one
    held-out split for both forms). ``scoring`` is the ``reasoning_gym`` reward's params.
    """

    feedback_turns: int = Field(
        0,
        ge=0,
        description="after a wrong answer, tell the model so and let it answer again, this "
        "many times (0: one answer per episode); needs environment.max_turns >= "
        "feedback_turns + 1. The score is the last answer's",
    )
    feedback: str = Field(
        "That is not right. Try again, and give your final answer in the same format.",
        min_length=1,
        description="the user message after a wrong answer (feedback_turns > 0)",
    )
    scoring: dict[str, Any] = Field(
        default_factory=dict,
        description="how the answer is read and scored: the params of the reasoning_gym "
        "reward, which scores it (strategies, lenient, correct, no_answer)",
    )

    @field_validator("scoring")
    @classmethod
    def _reward_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value:  # checked now, against the reward that will score (its params model)
            scoring_params(value)
        return value


#: The reward whose scoring the ``reasoning_gym`` environment uses (found by name, so one
#: plugin family never imports another's modules).
SCORING_REWARD = "reasoning_gym"


def scoring_reward() -> Any:
    """The registered ``reasoning_gym`` reward record."""
    return create_host().rewards[SCORING_REWARD]


def scoring_params(value: dict[str, Any]) -> Any:
    """``value`` validated as the ``reasoning_gym`` reward's params."""
    return scoring_reward().params.model_validate(value)


#: The named reward of the ``reasoning_gym`` environment (the task's score_answer).
SCORE_ANSWER = "score_answer"
#: The ``data.reasoning_gym`` keys of :class:`ReasoningGymEnvParams`.
TASK_FIELDS = tuple(ReasoningGymConfig.model_fields)


__all__ = [
    "BUILTIN_TOOLS",
    "OpenEnvParams",
    "ReasoningGymEnvParams",
    "SCORE_ANSWER",
    "SCORING_REWARD",
    "SingleTurnParams",
    "TASK_FIELDS",
    "ToolsParams",
    "TrlEnvParams",
    "VerifiersParams",
    "scoring_params",
    "scoring_reward",
]
