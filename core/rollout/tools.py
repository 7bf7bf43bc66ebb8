"""Tool calling at the message level: JSON schemas of Python functions, and tool calls parsed
from a model's text in its family's format.

Shared by the episode runner (:mod:`rlvr.rollout.episodes`: it parses each assistant turn, so
an environment receives structured ``tool_calls`` whatever the model family) and the ``tools``
environment (it describes its functions to the chat template with :func:`tool_schema`).

A tool the user names in a config (``"module:function"`` or ``"file.py:function"``) is checked by
:func:`check_tool` from its source, read and never run (``rlvr validate``), and each call's
arguments are checked and converted by :func:`tool_arguments` against the function's type
hints, the same types its schema announces.

Formats: ``hermes`` is the ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` of
Qwen2.5/Qwen3, Hermes and most chat templates that take ``tools=``; ``none`` parses nothing.
:func:`tool_call_format` picks one from a chat template. A malformed call is kept as a call
with an ``error`` (never an exception): the environment feeds it back to the model, which is
what a model must learn from.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Literal

from rlvr.api.usercode import check_function, definition, split_spec

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
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(
                f"tool {fn.__name__!r}: parameter {name!r} is positional-only (a tool is called "
                "with keyword arguments)"
            )
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
        if len(rest) == 1:  # Optional[X]: the model may send null (transformers says it so)
            return {**_json_type(rest[0], where), "nullable": True}
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


# --------------------------------------------------------------------------- calling a tool

_JSON_NAMES: dict[type, str] = {
    type(None): "null",
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "array",
    dict: "object",
}


def tool_arguments(fn: Callable[..., Any], arguments: Any) -> dict[str, Any]:
    """The keyword arguments of a call of tool ``fn``: ``arguments`` as the model gave them (a
    dict, or its JSON text; None or "" for none) checked against ``fn``'s signature and type
    hints (the types :func:`tool_schema` announces) and converted where JSON cannot say it (a
    whole number for a ``float``, an array for a ``tuple``). Raises ``ValueError`` saying every
    missing, unknown or mistyped argument, in words meant for the model."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"the arguments are not valid JSON ({exc.msg})") from None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ValueError(
            f"the arguments must be a JSON object of the parameters, not {_json_name(arguments)}"
        )
    params = inspect.signature(fn).parameters
    hints = typing.get_type_hints(fn)
    problems = []
    unknown = [k for k in arguments if k not in params]
    if unknown:
        problems.append(
            f"unknown argument {', '.join(map(repr, unknown))} (the parameters are: "
            f"{', '.join(params) or 'none'})"
        )
    missing = [n for n, p in params.items() if p.default is p.empty and n not in arguments]
    if missing:
        problems.append(f"missing required argument {', '.join(map(repr, missing))}")
    out = {}
    for key, value in arguments.items():
        if key not in params:
            continue
        try:
            out[key] = _converted(value, hints[key]) if key in hints else value
        except ValueError as exc:
            problems.append(f"{key!r} {exc}")
    if problems:
        raise ValueError("; ".join(problems))
    return out


def _json_name(value: Any) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)


def _converted(value: Any, hint: Any) -> Any:
    """``value`` as the type ``hint`` (one :func:`_json_type` describes); raises ValueError."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        return _converted(value, rest[0]) if len(rest) == 1 else value
    if origin is Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        raise ValueError(f"must be one of {json.dumps(list(args))}, not {json.dumps(value)}")
    base = origin or hint
    if base is float and type(value) is int:
        return float(value)
    if base is int and type(value) is float and value.is_integer():
        return int(value)
    if base in (tuple, list) and type(value) is list:
        if args and args[0] is not Ellipsis:
            return base(_converted(v, args[0]) for v in value)
        return base(value)
    want = {tuple: list}.get(base, base)
    if want in _JSON_NAMES and type(value) is not want:
        name = _JSON_TYPES.get(base, "array")
        raise ValueError(
            f"must be {'an' if name[0] in 'aeiou' else 'a'} {name}, not "
            f"{_json_name(value)} {json.dumps(value, default=str)[:60]}"
        )
    return value


# --------------------------------------------------------------------------- a user's tool


def check_tool(spec: str) -> str | None:
    """Why the function ``spec`` (``"module:function"`` or ``"file.py:function"``) cannot be
    a tool, as far as reading its source tells (nothing is imported or run): the module or
    file and the name, then the signature of a plain ``def``: no ``*args``/``**kwargs`` or
    positional-only parameters, a type hint on every parameter, and no hint without a JSON
    type (hints that name the module's own classes or aliases are left to the build, which
    imports it). None when nothing is wrong or it cannot be told."""
    problem = check_function(spec)
    if problem:
        return problem
    found = definition(spec)
    if found is None:
        return None
    tree, node = found
    label = f"tool {spec!r}"
    if isinstance(node, ast.ClassDef):
        return f"{label} is a class; a tool is a function (def)"
    if isinstance(node, ast.Assign):
        value = node.value
        if isinstance(value, ast.Lambda):
            return f"{label} is a lambda, which cannot carry type hints; write a def"
        literal = {ast.List: "list", ast.Dict: "dict", ast.Set: "set", ast.Tuple: "tuple"}
        kind = literal.get(type(value)) or (
            type(value.value).__name__ if isinstance(value, ast.Constant) else None
        )
        article = "an" if kind and kind[0] in "aeiou" else "a"
        return None if kind is None else f"{label} is {article} {kind}, not a function"
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    if node.decorator_list:
        return None  # a decorator may change the signature: the build reads the real one
    a = node.args
    if a.vararg is not None or a.kwarg is not None:
        star = f"*{a.vararg.arg}" if a.vararg is not None else f"**{a.kwarg.arg}"  # type: ignore[union-attr]
        return f"{label}: {star} cannot be described to the model; name each parameter"
    if a.posonlyargs:
        return (
            f"{label}: parameter {a.posonlyargs[0].arg!r} is positional-only (a tool is called "
            "with keyword arguments)"
        )
    names = _hint_names(tree)
    for arg in [*a.args, *a.kwonlyargs]:
        if arg.annotation is None:
            return (
                f"{label}: parameter {arg.arg!r} needs a type hint (str, int, float, bool, "
                "list[...], dict, Optional[...] or Literal[...]): the model is told its JSON type"
            )
        try:
            hint = _resolved(arg.annotation, names)
        except LookupError:
            continue  # a name of the module's own: the build checks it
        try:
            _json_type(hint, f"{node.name}.{arg.arg}")
        except TypeError:
            return (
                f"{label}: parameter {arg.arg!r}: type {ast.unparse(arg.annotation)} has no "
                "JSON type (use str, int, float, bool, list[...], dict, Optional[...] or "
                "Literal[...])"
            )
    return None


_BUILTIN_HINTS = (
    "str",
    "int",
    "float",
    "bool",
    "list",
    "dict",
    "tuple",
    "set",
    "frozenset",
    "bytes",
    "complex",
    "object",
    "type",
)
_HINT_MODULES = ("typing", "collections.abc")  # the standard library only: nothing else loads


def _hint_names(tree: ast.Module) -> dict[str, Any]:
    """What the names a module's annotations may use stand for, from its source: the builtin
    types it does not rebind, and what it imports from ``typing`` or ``collections.abc``."""
    names: dict[str, Any] = {n: getattr(builtins, n) for n in _BUILTIN_HINTS}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module in _HINT_MODULES and not node.level:
            module = importlib.import_module(node.module)
            for alias in node.names:
                if hasattr(module, alias.name):
                    names[alias.asname or alias.name] = getattr(module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in _HINT_MODULES and alias.asname:
                    names[alias.asname] = importlib.import_module(alias.name)
                elif alias.name in _HINT_MODULES:
                    top = alias.name.split(".")[0]
                    names[top] = importlib.import_module(top)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.pop(node.name, None)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.pop(n.id, None)
    return names


def _resolved(node: ast.expr, names: dict[str, Any]) -> Any:
    """The type an annotation's source stands for, built from ``names`` (no code is run);
    raises LookupError when it uses anything else."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, str):  # a quoted annotation
            try:
                return _resolved(ast.parse(node.value, mode="eval").body, names)
            except SyntaxError:
                raise LookupError(node.value) from None
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise LookupError(node.id)
        return names[node.id]
    if isinstance(node, ast.Attribute) and not node.attr.startswith("_"):
        base = _resolved(node.value, names)
        if not isinstance(base, types.ModuleType) or not hasattr(base, node.attr):
            raise LookupError(node.attr)
        return getattr(base, node.attr)
    try:
        if isinstance(node, ast.Subscript):
            base = _resolved(node.value, names)
            inner = node.slice
            if isinstance(inner, ast.Tuple):
                return base[tuple(_resolved(e, names) for e in inner.elts)]
            return base[_resolved(inner, names)]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return _resolved(node.left, names) | _resolved(node.right, names)
    except TypeError:  # not a generic, or not a union of types
        raise LookupError(ast.unparse(node)) from None
    raise LookupError(ast.unparse(node))


def tool_name(spec: str) -> str:
    """The name a tool given as ``spec`` has for the model: the function's (after ``:``, the
    last part of a dotted attribute)."""
    return split_spec(spec)[1].rsplit(".", 1)[-1]


__all__ = [
    "FORMATS",
    "ToolCallFormat",
    "check_tool",
    "parse_tool_calls",
    "tool_arguments",
    "tool_call_format",
    "tool_name",
    "tool_schema",
]
