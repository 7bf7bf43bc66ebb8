"""TRL 1.16's conventions for an ``environment_factory`` class, as ``GRPOTrainer`` applies
them: which methods are tools, and what the model sees back from a tool call. The ``trl_env``
environment plugin (:mod:`rlvr.plugins.environments.trl_env`) drives such a class with them."""

from __future__ import annotations

import inspect

from rlvr.api.runtime import Message

#: The methods TRL does not expose as tools.
NOT_TOOLS = ("reset", "get_reward")


def tool_names(cls: type) -> list[str]:
    """The methods TRL exposes as tools: public functions on the class, minus ``reset`` and
    ``get_reward`` (listed on the class so a property is never evaluated)."""
    return [
        name
        for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
        if name not in NOT_TOOLS and not name.startswith("_")
    ]


def tool_message(name: str, content: str) -> Message:
    """A tool's reply as TRL appends it: ``content`` is ``str(result)``."""
    return {"role": "tool", "name": name, "content": content}


def tool_error(name: str, error: str) -> Message:
    """A failed tool call (it raised, or names no tool) as TRL words it, ``str({"error":
    ...})``, so the model sees it and the episode goes on."""
    return tool_message(name, str({"error": error}))


__all__ = ["NOT_TOOLS", "tool_error", "tool_message", "tool_names"]
