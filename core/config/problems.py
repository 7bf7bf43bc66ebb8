"""How config problems are worded, placed and ordered: ``(path, message)`` pairs.

Pydantic's errors become messages that echo the bad value (``-1 is not > 0``) at a path in the
config's own terms (``rewards[1].params.tolerance``); an unknown key gets a did-you-mean and,
after a separator, the valid keys; a problem at a key given with ``--set`` says so.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from rlvr.api.errors import RlvrError


def pydantic_problems(
    exc: ValidationError,
    prefix: str,
    model: type[BaseModel],
    elsewhere: Callable[[str], str | None] = lambda key: None,
    also: Mapping[str, Sequence[str]] | None = None,
) -> list[tuple[str, str]]:
    """The errors of validating ``model`` at ``prefix`` (e.g. ``rewards[1].params``).
    ``elsewhere(key)`` says where an unknown key without a near miss does belong, if anywhere
    (another plugin's params). ``also`` names keys accepted at a path besides the model's
    fields (TRL's under ``training``), so a near miss of one is suggested, not an unrelated
    field."""
    problems = []
    for err in exc.errors():
        loc = err["loc"]
        path = _path(prefix, loc)
        if err["type"] == "extra_forbidden":
            key = str(loc[-1])
            extra = (also or {}).get(_path(prefix, loc[:-1]), ())
            msg = _unknown_key_message(key, _model_at(model, loc[:-1]), elsewhere(key), extra)
        else:
            msg = _describe(err)
        problems.append((path, msg))
    return problems


_BOUNDS = {
    "greater_than": ("gt", ">"),
    "greater_than_equal": ("ge", ">="),
    "less_than": ("lt", "<"),
    "less_than_equal": ("le", "<="),
}


def _describe(err: Any) -> str:
    """A pydantic error as a message that echoes the bad value (``-1 is not > 0``)."""
    kind, value, ctx = err["type"], err.get("input"), err.get("ctx") or {}
    if kind == "missing":
        return "required field is missing"
    if kind in _BOUNDS:
        name, op = _BOUNDS[kind]
        bound = ctx.get(name)
        return (
            f"{value!r} is not {op} {bound:g}"
            if isinstance(bound, float)
            else (f"{value!r} is not {op} {bound}")
        )
    if kind == "model_type":  # not "instance of TrainingConfig": the user wrote no class
        return f"must be a mapping of settings, e.g. {{key: value}} (got {_clip(repr(value))})"
    if kind == "literal_error":
        return f"{value!r} is not one of {ctx.get('expected')}"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if isinstance(value, dict | list) or kind.startswith(("value_error", "assertion")):
        return msg
    return f"{msg} (got {_clip(repr(value))})"


def _clip(text: str, size: int = 60) -> str:
    return text if len(text) <= size else text[: size - 3] + "..."


def _unknown_key_message(
    key: str,
    model: type[BaseModel] | None,
    elsewhere: str | None = None,
    extra: Sequence[str] = (),
) -> str:
    msg = f"unknown key {key!r}"
    if model is not None:
        fields = list(model.model_fields)
        close = difflib.get_close_matches(key, [*fields, *extra], n=1)
        close = close or [f for f in fields if f.startswith(key)][:1]  # `name` -> name_or_path
        if close:
            msg += f"; did you mean {close[0]!r}?"
        elif elsewhere:
            msg += f"; {elsewhere}"
        msg += f" -- valid keys: {', '.join(fields)}"
    return msg


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside an annotation (through Optional, list, unions, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose fields the error at ``loc`` (without its last part) refers to."""
    models = [root]
    for part in loc:
        if isinstance(part, int):
            continue
        found = [m.model_fields[part].annotation for m in models if part in m.model_fields]
        if not found:
            return None
        models = _models_in(found[0])
    return models[0] if len(models) == 1 else None


def _path(prefix: str, loc: tuple[Any, ...]) -> str:
    """``("rewards[1].params", ("x", 0))`` -> ``rewards[1].params.x[0]``."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def key_path(key: str) -> str:
    """``rewards.1.weight`` or ``rewards[1].weight`` -> ``rewards[1].weight`` (problem paths)."""
    parts = key.replace("[", ".").replace("]", "").strip(".").split(".")
    return "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in parts).lstrip(".")


def with_origins(problems: list[tuple[str, str]], overrides: Sequence[str]) -> list:
    """``problems`` with `` (from --set KEY=VALUE)`` added to those at an overridden key, under
    one (a param of an overridden entry) or above one (``traning`` for ``traning.seed=1``)."""
    set_keys = {key_path(o.split("=", 1)[0]): o for o in overrides if "=" in o}
    out = []
    for path, msg in problems:
        for key, item in set_keys.items():
            under = path == key or path.startswith((f"{key}.", f"{key}["))
            if under or (path and key.startswith((f"{path}.", f"{path}["))):
                msg += f" (from --set {item})"
                break
        out.append((path, msg))
    return out


def sort_problems(
    problems: list[tuple[str, str]], sections: Sequence[str]
) -> list[tuple[str, str]]:
    """In the order of the config's sections, then entries (stable within one path)."""

    def key(item: tuple[str, str]) -> tuple[int, int, str]:
        path = item[0]
        head = path.split(".")[0].split("[")[0]
        index = path.split("[")[1].split("]")[0] if path.startswith(f"{head}[") else "0"
        order = sections.index(head) if head in sections else len(sections)
        return order, int(index) if index.isdigit() else 0, path

    return sorted(problems, key=key)


class ConfigError(RlvrError):
    """A config with problems; ``problems`` lists ``(path, message)`` pairs."""

    def __init__(self, problems: list[tuple[str, str]], source: str | None = None):
        self.problems = problems
        self.source = source
        super().__init__(self.format())

    def format(self) -> str:
        head = f"{self.source}: " if self.source else ""
        n = len(self.problems)
        lines = [f"{head}{n} problem{'s' if n != 1 else ''} in the config:"]
        lines += [f"  {path or '(top level)'}: {msg}" for path, msg in self.problems]
        return "\n".join(lines)
