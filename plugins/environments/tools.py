"""``tools``: Python functions as tools. The model calls them (in its family's tool-call format,
parsed by rlvr), each result goes back as a ``tool`` message, and the first assistant message
without a call ends the episode: that answer is what the rewards score.

The tools are the built-in ones by name and the user's functions by spec (``"module:function"``,
``"file.py:function"``: imported when the environment is built, which ``--allow-code`` must
allow). Each function's schema (:func:`rlvr.plugin.tool_schema`, from its type hints and docstring)
is made once, at build, and is what the chat template shows the model.

A call's ``arguments`` (a dict, or its JSON text) are checked against the function's signature
and type hints first (:func:`rlvr.plugin.tool_arguments`). A malformed call, an unknown tool, bad
arguments or a tool that raises is answered with an ``error: ...`` tool message, so the model
sees what went wrong and the episode goes on. A result is sent as text: a ``str`` as it is,
anything else as JSON. Sync tools run in a worker thread (``asyncio.to_thread``), so a slow
one never stalls the other episodes' event loop; ``async def`` ones are awaited. The
environment entry's ``turn_timeout`` bounds each assistant message's calls together: past it
the episode fails (left out of the step), and the thread is not stopped (Python cannot); a
tool that may hang must bound its own work.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Sequence
from typing import Any

from rlvr import RlvrError
from rlvr._builtin import evaluate_arithmetic, load_function, tool_name
from rlvr.plugin import EnvResponse, EpisodeStart, Message, RunInfo, tool_arguments, tool_schema
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


def load_tool(spec: str) -> tuple[str, Callable[..., Any], dict[str, Any]]:
    """The user's function ``spec`` as a tool: its name, the function and its schema. Raises
    (an error naming ``spec``) when it does not import, is not a function, or has a signature
    that cannot be described."""
    try:
        fn = load_function(spec)
    except (ImportError, AttributeError, OSError, SyntaxError, TypeError) as exc:
        raise RlvrError(f"tool {spec!r} does not load: {type(exc).__name__}: {exc}") from exc
    if not inspect.isroutine(fn):
        raise RlvrError(f"tool {spec!r} is a {type(fn).__name__}; a tool is a function (def)")
    try:
        schema = tool_schema(fn)
    except (TypeError, NameError) as exc:  # NameError: a type hint that does not resolve
        raise RlvrError(f"tool {spec!r}: {exc}") from None
    name = tool_name(spec)
    schema["function"]["name"] = name
    return name, fn, schema


class ToolsEnvironment:
    """Offers ``functions`` (the params' tools: built-in names and the user's functions, or any
    given in Python) as tools."""

    def __init__(
        self,
        params: ToolsParams,
        run: RunInfo,
        functions: Sequence[Callable[..., Any]] | None = None,
    ):
        self.params = params
        self.functions: dict[str, Callable[..., Any]] = {}
        self.schemas: list[dict[str, Any]] = []
        if functions is not None:
            for fn in functions:
                self.functions[fn.__name__] = fn
                self.schemas.append(tool_schema(fn))
            return
        for entry in params.tools:
            if ":" in entry:
                name, fn, schema = load_tool(entry)
            else:
                name, fn = entry, BUILTINS[entry]
                schema = tool_schema(fn)
            self.functions[name] = fn
            self.schemas.append(schema)

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
        function = call.get("function") or {}
        name = str(function.get("name") or "")
        if "error" in call:
            return _tool_message(name, f"error: {call['error']}")
        fn = self.functions.get(name)
        if fn is None:
            known = ", ".join(self.functions)
            return _tool_message(name, f"error: unknown tool {name!r}; the tools are: {known}")
        try:
            kwargs = tool_arguments(fn, function.get("arguments"))
        except ValueError as exc:
            return _tool_message(name, f"error: bad arguments: {exc}")
        try:
            if inspect.iscoroutinefunction(fn):
                result = await fn(**kwargs)
            else:
                result = await asyncio.to_thread(fn, **kwargs)
        except Exception as exc:  # the tool's own failure is the model's to see
            return _tool_message(name, f"error: {type(exc).__name__}: {exc}")
        return _tool_message(name, _text(result))


def _text(result: Any) -> str:
    """A tool's result as the text the model reads: a ``str`` as it is, anything else as JSON
    (what JSON cannot carry as its ``str``)."""
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, default=str)


def _tool_message(name: str, content: str) -> Message:
    return {"role": "tool", "name": name, "content": content}


__all__ = ["BUILTINS", "ToolsEnvironment", "calculator", "load_tool"]
