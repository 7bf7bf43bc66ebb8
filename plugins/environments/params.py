"""Params models of the built-in environments: light (pydantic only), imported at registration
and by ``rlvr validate``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from rlvr import Params

#: The tools the ``tools`` environment has built in, by name.
BUILTIN_TOOLS = ("calculator",)


class SingleTurnParams(Params):
    """``single_turn``: no params; the episode is one completion of the dataset prompt."""


class ToolsParams(Params):
    """``tools``: the model may call the listed tools; an answer without a call ends it."""

    tools: list[Literal["calculator"]] = Field(
        ["calculator"],
        min_length=1,
        description="the built-in tools offered to the model (calculator: + - * / and "
        "parentheses on numbers)",
    )
    system_prompt: str | None = Field(
        None, description="a system message put first in every episode (after none in the row)"
    )
    max_calls_per_turn: int = Field(
        4, ge=1, description="most tool calls of one assistant message that are run"
    )


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


__all__ = ["BUILTIN_TOOLS", "SingleTurnParams", "ToolsParams", "VerifiersParams"]
