"""``callable``: use a TRL-style reward function as it is, without rewriting it.

TRL's ``GRPOTrainer`` (1.16) calls each reward function on a batch as
``fn(prompts=[...], completions=[...], completion_ids=[[int, ...], ...], **columns,
trainer_state=..., log_extra=..., log_metric=...)`` (every dataset column but
``prompt``/``completion``/``completion_ids`` as a list) and expects a list with one float or
``None`` per completion. This reward imports such a function and calls it exactly that way,
inside rlvr's reward workers, on the batch TRL's call would see::

    rewards:
      - name: callable
        params:
          function: my_rewards:correctness_reward_func      # module:function
          kwargs: {bonus: 0.5}                              # extra keyword arguments
      - name: callable
        label: strict_format
        params: {function: "rewards/format.py:strict_format_reward_func"}   # file:function

- ``function`` is ``"module:function"`` (a module importable from ``sys.path`` or the current
  directory, e.g. ``my_pkg.rewards:accuracy``) or ``"path/to/file.py:function"`` (a relative
  path resolves against the config file's directory, or the current directory when given with
  ``--set``). The part
  after ``:`` may be a dotted attribute (``module:Class.method``).
- ``format`` follows TRL's dataset formats: ``standard`` passes the prompt text and the
  completion text; ``conversational`` passes message lists (``prompts=[[{role, content},
  ...]]``, ``completions=[[{"role": "assistant", "content": text}]]``); ``auto`` (default) is
  conversational when the row's ``prompt`` is a list of messages, as TRL decides.
- ``kwargs`` are passed on every call and win over a dataset column of the same name.
- ``batch``: ``step`` (default) calls the function once on every completion scored together:
  in training all completions of a step's generation round on this rank (TRL scores a
  process's whole generation batch per call), in ``rlvr eval`` an eval batch; ``group`` once
  per prompt's completions. ``rlvr rewards score`` always calls it on the rows that share a
  prompt. The entry's ``timeout`` is per completion: a call on ``n`` may take ``n x timeout``;
  a call that raises, times out or returns the wrong number of values gives every completion
  of the batch the ``fallback`` (each counts as an error).
- ``completion_ids`` are the sampled token ids of each completion (None when scoring a file of
  texts with ``rlvr rewards score``: there are no tokens).
- ``trainer_state`` has ``global_step`` (optimizer steps done: 0 while the first step is
  scored, as in TRL), ``epoch`` (passes over the prompts) and ``max_steps`` (all 0 outside
  training).
- ``log_extra(column, values)`` (one value per completion) adds a column to each sample's
  ``extra`` in ``samples.jsonl``; ``log_metric(name, value)`` adds the metric
  ``reward/<label>/<name>`` (averaged over the step's calls, as TRL averages).
- An ``async def`` function (or one returning an awaitable) is awaited.
- ``None`` means "not applicable": it adds nothing to the weighted sum; a completion for which
  every reward returns None is left out of its group's baseline and gets advantage 0 (TRL's
  rule).

Validation checks the form of ``function`` without running anything, and the config check
(the family's ``rlvr_validate_config``, :func:`check_function`) that the module or file exists
and, by reading its source, that it defines the function; the import itself happens in each
reward worker.

**This runs the code the config names**: the function is imported and executed with your
permissions, like any Python script you run. So the record declares it (``runs_code``) and a
config with a ``callable`` entry runs only with ``--allow-code`` on the command line
(``allow_code=True`` in Python). Only pass it for configs whose ``function`` you trust.
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

from rlvr import BatchOutput, Sample, call_trl_batch
from rlvr.plugins.rewards.params import CallableParams, is_file_spec, split_spec


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


class CallableReward:
    """Calls the TRL-style function on a batch of samples (a :class:`rlvr.BatchRewardFn`)."""

    def __init__(self, params: CallableParams) -> None:
        self.params = params
        self.fn = load_function(params.function)

    def __call__(self, samples: list[Sample]) -> BatchOutput:
        p = self.params
        return call_trl_batch(self.fn, samples, format=p.format, kwargs=p.kwargs, name=p.function)


# --------------------------------------------------------------------------- config check


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
    """``(path of the source, problem)`` for a module or file target, without importing it
    (only the top-level package of a dotted module is located, never executed)."""
    if is_file_spec(target):
        path = Path(target)
        return (str(path), None) if path.is_file() else (None, f"no file {str(path)!r}")
    top = target.split(".")[0]
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
    if "." in target or not spec.origin or not spec.origin.endswith(".py"):
        return None, None  # a submodule or compiled module: checked when a worker imports it
    return spec.origin, None


def check_function(spec: str) -> str | None:
    """Why ``spec`` cannot be imported, as far as reading (not running) the source tells."""
    target, attr = split_spec(spec)
    origin, problem = _source_of(target)
    if problem or origin is None:
        return problem
    try:
        source = Path(origin).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read {origin!r}: {exc}"
    try:
        tree = ast.parse(source, filename=origin)
    except SyntaxError as exc:  # else every call of the reward would fail with it, in training
        return f"{origin!r} line {exc.lineno}: SyntaxError: {exc.msg}; fix the file"
    names = _defined_names(tree)
    head = attr.split(".")[0]
    if names is None or head in names:
        return None
    close = difflib.get_close_matches(head, sorted(names), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{origin!r} defines no {head!r} at top level{hint}"


__all__ = [
    "CallableParams",
    "CallableReward",
    "check_function",
    "load_function",
]
