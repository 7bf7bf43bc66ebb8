"""Tool calling at the message level: JSON schemas of Python functions, and tool calls parsed
from a model's text in its family's format.

Shared by the episode runner (:mod:`rlvr.rollout.episodes`: it parses each assistant turn, so
an environment receives structured ``tool_calls`` whatever the model family) and the ``tools``
environment (it describes its functions to the chat template with :func:`tool_schema`).

Formats: ``hermes`` is the ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` of
Qwen2.5/Qwen3, Hermes and most chat templates that take ``tools=``; ``none`` parses nothing.
:func:`tool_call_format` picks one from a chat template. A malformed call is kept as a call
with an ``error`` (never an exception): the environment feeds it back to the model, which is
what a model must learn from.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal

ToolCallFormat = Literal["auto", "hermes", "none"]
FORMATS = ("hermes", "none")

_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


def tool_call_format(chat_template: str | None, configured: str = "auto") -> str:
    """The format to parse: ``configured`` unless ``auto``; then ``hermes`` when the chat
    template writes ``<tool_call>`` (Qwen, Hermes), else ``none`` (a template without tool
    calls gives the model no format to follow)."""
    if configured != "auto":
        return configured
    return "hermes" if chat_template and "<tool_call>" in chat_template else "none"


def parse_tool_calls(text: str, fmt: str = "hermes") -> list[dict[str, Any]]:
    """The tool calls in ``text`` as chat-template ``tool_calls`` entries:
    ``{"type": "function", "function": {"name": str, "arguments": dict}}``; a call that cannot
    be read gets an ``"error"`` key saying why (its name when one was readable)."""
    if fmt == "none":
        return []
    if fmt != "hermes":
        raise ValueError(f"unknown tool-call format {fmt!r}; known: {', '.join(FORMATS)}")
    calls = []
    for match in _HERMES.finditer(text):
        calls.append(_hermes_call(match.group(0), match.group(1).strip()))
    return calls


def _hermes_call(whole: str, body: str) -> dict[str, Any]:
    call: dict[str, Any] = {"type": "function", "function": {"name": "", "arguments": {}}}
    if not whole.endswith("</tool_call>"):
        call["error"] = "the tool call is not closed with </tool_call>"
        return call
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        call["error"] = f"the tool call is not valid JSON ({exc.msg} at column {exc.colno})"
        return call
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        call["error"] = 'the tool call must be a JSON object {"name": ..., "arguments": {...}}'
        return call
    call["function"]["name"] = value["name"]
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string
        with contextlib.suppress(json.JSONDecodeError):  # then reported as not an object
            arguments = json.loads(arguments)
    if not isinstance(arguments, dict):
        call["error"] = "the tool call's arguments must be a JSON object"
        return call
    call["function"]["arguments"] = arguments
    return call


def tool_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """The JSON schema chat templates take in ``tools=`` for ``fn``, from its type hints and
    docstring: the docstring's first paragraph describes the function, and an ``Args:``
    section (Google style) each parameter. A parameter without a default is required. Raises
    ``TypeError`` for a parameter without a type hint or of a type JSON cannot carry."""
    hints = typing.get_type_hints(fn)
    doc = inspect.getdoc(fn) or ""
    described = _arg_docs(doc)
    properties: dict[str, Any] = {}
    required = []
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {fn.__name__!r}: *args/**kwargs cannot be described")
        if name not in hints:
            raise TypeError(f"tool {fn.__name__!r}: parameter {name!r} needs a type hint")
        prop = _json_type(hints[name], f"{fn.__name__}.{name}")
        if name in described:
            prop["description"] = described[name]
        properties[name] = prop
        if param.default is param.empty:
            required.append(name)
    summary = doc.split("\n\n", 1)[0].strip().replace("\n", " ")
    return {
        "type": "function",
        "function": {
            "name": fn.__name__,
            "description": summary,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def _json_type(hint: Any, where: str) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint in _JSON_TYPES:
        return {"type": _JSON_TYPES[hint]}
    if origin is Literal:
        return {"type": _JSON_TYPES.get(type(args[0]), "string"), "enum": list(args)}
    if origin in (list, tuple) and args:
        return {"type": "array", "items": _json_type(args[0], where)}
    if origin is dict:
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _json_type(rest[0], where)
    raise TypeError(f"tool parameter {where}: type {hint!r} has no JSON schema type")


def _arg_docs(doc: str) -> dict[str, str]:
    """``name: description`` lines of a docstring's ``Args:`` section."""
    out: dict[str, str] = {}
    section = re.search(r"^(?:Args|Arguments|Parameters):\s*$(.*?)(?:^\S|\Z)", doc, re.M | re.S)
    if section is None:
        return out
    for line in section.group(1).splitlines():
        m = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


__all__ = ["FORMATS", "ToolCallFormat", "parse_tool_calls", "tool_call_format", "tool_schema"]
