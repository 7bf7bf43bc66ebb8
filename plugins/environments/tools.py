"""``tools``: Python functions as tools. The model calls them (in its family's tool-call format,
parsed by rlvr), each result goes back as a ``tool`` message, and the first assistant message
without a call ends the episode: that answer is what the rewards score.

A malformed call, an unknown tool or a tool that raises is answered with an error message, so
the model sees what went wrong and the episode goes on. Tools run in a worker thread
(``asyncio.to_thread``), so a slow one never stalls the other episodes' event loop; the
environment entry's ``turn_timeout`` bounds it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

from rlvr import (
    EnvResponse,
    EpisodeStart,
    Message,
    RunInfo,
    evaluate_arithmetic,
    tool_schema,
)
from rlvr.plugins.environments.params import ToolsParams


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly as written.

    Args:
        expression: numbers with + - * / and parentheses, e.g. "(12 + 7) * 31"
    """
    try:
        value = evaluate_arithmetic(expression.replace("×", "*").replace("÷", "/"))
    except ZeroDivisionError:
        return "error: division by zero"
    if value is None:
        return f"error: cannot evaluate {expression!r}; use numbers, + - * / and parentheses"
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


BUILTINS: dict[str, Callable[..., Any]] = {"calculator": calculator}


class ToolsEnvironment:
    """Offers ``functions`` (the params' built-in tools, or any given in Python) as tools."""

    def __init__(
        self,
        params: ToolsParams,
        run: RunInfo,
        functions: Sequence[Callable[..., Any]] | None = None,
    ):
        self.params = params
        chosen = list(functions) if functions is not None else [BUILTINS[n] for n in params.tools]
        self.functions = {fn.__name__: fn for fn in chosen}
        self.schemas = [tool_schema(fn) for fn in chosen]

    async def start(self, row: dict[str, Any], prompt: list[Message]) -> EpisodeStart:
        messages = list(prompt)
        if self.params.system_prompt and not (messages and messages[0]["role"] == "system"):
            messages.insert(0, {"role": "system", "content": self.params.system_prompt})
        return EpisodeStart(messages=messages, tools=self.schemas, state={"calls": 0})

    async def respond(self, state: Any, message: Message) -> EnvResponse:
        calls = message.get("tool_calls") or []
        if not calls:
            return EnvResponse(done=True)
        replies = []
        for call in calls[: self.params.max_calls_per_turn]:
            state["calls"] += 1
            replies.append(await self._run(call))
        return EnvResponse(messages=replies)

    async def close(self, state: Any) -> None:
        """Nothing is held."""

    async def _run(self, call: dict[str, Any]) -> Message:
        name = call["function"]["name"]
        if "error" in call:
            return _tool_message(name, f"error: {call['error']}")
        fn = self.functions.get(name)
        if fn is None:
            known = ", ".join(self.functions)
            return _tool_message(name, f"error: unknown tool {name!r}; the tools are: {known}")
        try:
            result = await asyncio.to_thread(fn, **call["function"]["arguments"])
        except TypeError as exc:  # wrong or missing arguments
            return _tool_message(name, f"error: bad arguments: {exc}")
        except Exception as exc:  # the tool's own failure is the model's to see
            return _tool_message(name, f"error: {type(exc).__name__}: {exc}")
        text = result if isinstance(result, str) else json.dumps(result)
        return _tool_message(name, text)


def _tool_message(name: str, content: str) -> Message:
    return {"role": "tool", "name": name, "content": content}


__all__ = ["BUILTINS", "ToolsEnvironment", "calculator"]
