"""Params models of the built-in environments: light (pydantic only), imported at registration
and by ``rlvr validate``."""

from __future__ import annotations

from typing import Literal

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


__all__ = ["BUILTIN_TOOLS", "SingleTurnParams", "ToolsParams"]
