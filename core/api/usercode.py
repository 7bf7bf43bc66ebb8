"""Python code a config names: ``"module:attr"`` or ``"path/to/file.py:attr"``.

A ``callable`` reward's function, an OpenEnv class, a TRL ``environment_factory`` class: one
spelling, checked in three steps. :func:`code_spec` validates the form and resolves a relative
file against the config's directory (params validation); :func:`check_function` reads, never
runs, the source to say what is wrong before a model loads (the config check);
:func:`load_function` imports it when the run builds the plugin. Running it needs the user's
``--allow-code`` (``runs_code`` on the plugin's record).
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from importlib.machinery import PathFinder
from pathlib import Path
from typing import Any


def split_spec(spec: str) -> tuple[str, str]:
    """``"a.b:c.d"`` -> ``("a.b", "c.d")``; ``"x/y.py:f"`` -> ``("x/y.py", "f")``."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ValueError(
            f"{spec!r} is not 'module:function' or 'path/to/file.py:function' "
            "(e.g. 'my_rewards:accuracy_reward')"
        )
    return target, attr


def is_file_spec(target: str) -> bool:
    return target.endswith(".py")


def code_spec(value: str, config_dir: str | Path | None = None) -> str:
    """``value`` checked as a spec without importing anything; a relative file path made
    absolute against ``config_dir`` (the config file's directory; the current directory when
    None). Raises ``ValueError`` saying what is wrong (a params validator's message)."""
    value = value.strip()
    target, attr = split_spec(value)
    if not all(part.isidentifier() for part in attr.split(".")):
        raise ValueError(f"{attr!r} (after ':') is not a Python name or dotted attribute")
    if is_file_spec(target):
        path = Path(target).expanduser()
        if not path.is_absolute():
            path = Path(config_dir or Path.cwd()) / path
        return f"{path}:{attr}"
    if not all(part.isidentifier() for part in target.split(".")):
        raise ValueError(
            f"{target!r} (before ':') is neither a dotted module name nor a path ending in .py"
        )
    return value


def load_function(spec: str) -> Callable[..., Any]:
    """Import the function named by ``spec`` (``module:function`` or ``file.py:function``)."""
    target, attr = split_spec(spec)
    if is_file_spec(target):
        path = Path(target)
        if not path.is_file():
            raise FileNotFoundError(f"no file {str(path)!r} (from function {spec!r})")
        digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
        name = f"rlvr_callable_{path.stem}_{digest}"
        module = sys.modules.get(name)
        if module is None:
            loader_spec = importlib.util.spec_from_file_location(name, path)
            if loader_spec is None or loader_spec.loader is None:
                raise ImportError(f"cannot import {str(path)!r}")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[name] = module  # so dataclasses/pickle inside it find the module
            try:
                loader_spec.loader.exec_module(module)
            except BaseException:
                del sys.modules[name]
                raise
    else:
        cwd = os.getcwd()
        if cwd not in sys.path:
            sys.path.append(cwd)  # like `python script.py` next to the rewards module
        module = importlib.import_module(target)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AttributeError(f"{target!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise TypeError(f"{spec!r} is {type(obj).__name__}, not a callable")
    return obj


def _defined_names(tree: ast.Module) -> set[str] | None:
    """Top-level names a module defines (also inside top-level ``if``/``try``/``with``
    blocks), or None when that cannot be told without running it (a star import, a module
    ``__getattr__``)."""
    names: set[str] = set()
    pending = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    return None
                names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While):
            for field in ("body", "orelse", "finalbody", "handlers"):
                pending.extend(getattr(node, field, None) or [])
        elif isinstance(node, ast.ExceptHandler):
            pending.extend(node.body)
    return None if "__getattr__" in names else names


def _source_of(target: str) -> tuple[str | None, str | None]:
    """``(path of the source, problem)`` for a module or file target, without importing it: the
    top-level package is located, never executed, and a dotted module's submodules are looked
    up in its package directories (None, None when that cannot be told: a compiled module, a
    module that is not a package, a package that makes its submodules on import)."""
    if is_file_spec(target):
        path = Path(target)
        return (str(path), None) if path.is_file() else (None, f"no file {str(path)!r}")
    parts = target.split(".")
    top = parts[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        spec = PathFinder.find_spec(top, [os.getcwd()])
    if spec is None:
        return None, (
            f"module {top!r} is not importable (not on sys.path nor in the current directory "
            f"{os.getcwd()!r})"
        )
    for depth, part in enumerate(parts[1:], start=1):
        locations = spec.submodule_search_locations
        if not locations:
            return None, None  # os.path: a module that is not a package (made on import)
        found = PathFinder.find_spec(part, list(locations))
        if found is None:
            package = ".".join(parts[:depth])
            return None, f"package {package!r} has no module {part!r} (in {', '.join(locations)})"
        spec = found
    if not spec.origin or not spec.origin.endswith(".py"):
        return None, None  # a compiled or namespace module: checked when it is imported
    return spec.origin, None


def _parsed(spec: str) -> tuple[str | None, ast.Module | None, str | None]:
    """``(path, tree, problem)`` of the source that defines ``spec``, read, never run (path and
    tree None when that cannot be told)."""
    target, _ = split_spec(spec)
    origin, problem = _source_of(target)
    if problem or origin is None:
        return None, None, problem
    try:
        source = Path(origin).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, None, f"cannot read {origin!r}: {exc}"
    try:
        tree = ast.parse(source, filename=origin)
    except SyntaxError as exc:  # else every call of the reward would fail with it, in training
        return None, None, f"{origin!r} line {exc.lineno}: SyntaxError: {exc.msg}; fix the file"
    return origin, tree, None


def definition(spec: str) -> tuple[ast.Module, ast.stmt] | None:
    """The parsed module and the top-level statement that defines ``spec``'s attribute (its
    ``def``, ``class`` or assignment; the last one when it is bound more than once), read,
    never run; None when the source cannot be read or the name is dotted or bound elsewhere
    (an import, a loop)."""
    _, attr = split_spec(spec)
    if "." in attr:
        return None
    _, tree, _ = _parsed(spec)
    if tree is None:
        return None
    found: ast.stmt | None = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == attr:
                found = node
        elif isinstance(node, ast.Assign):
            names = {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
            if attr in names:
                found = node
        elif isinstance(node, ast.Import | ast.ImportFrom) and any(
            (a.asname or a.name.split(".")[0]) == attr for a in node.names
        ):
            found = None
    return None if found is None else (tree, found)


def check_function(spec: str) -> str | None:
    """Why ``spec`` cannot be imported, as far as reading (not running) the source tells."""
    _, attr = split_spec(spec)
    origin, tree, problem = _parsed(spec)
    if problem or tree is None:
        return problem
    names = _defined_names(tree)
    head = attr.split(".")[0]
    if names is None or head in names:
        return None
    close = difflib.get_close_matches(head, sorted(names), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{origin!r} defines no {head!r} at top level{hint}"


def function_name(fn: Any) -> str:
    """``module:qualname`` of a function (``__main__:accuracy``), for configs and messages."""
    module = getattr(fn, "__module__", None) or "?"
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}:{qualname}"


__all__ = [
    "check_function",
    "code_spec",
    "definition",
    "function_name",
    "is_file_spec",
    "load_function",
    "split_spec",
]
