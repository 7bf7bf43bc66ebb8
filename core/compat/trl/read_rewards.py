"""A TRL script's ``reward_funcs=[...]`` as ``rewards:`` entries: a function defined in the
script becomes a ``callable`` entry (copied with what it uses to ``CONFIG_rewards.py`` when
importing the script would run more than definitions), an imported one ``module:name``, a
string (a reward model) a ``reward_model`` entry."""

from __future__ import annotations

import ast
import copy
import importlib.util
import os
import re
from pathlib import Path
from typing import Any

from rlvr.compat.trl.script import (
    Reader,
    Script,
    argument,
    dotted_name,
)


def read_rewards(reader: Reader, trainer: ast.Call | None, out: Script, config: Path) -> None:
    node = argument(trainer, "reward_funcs", 1) if trainer is not None else None
    if node is None:
        out.todo("rewards", "no reward_funcs found: add rewards (rlvr plugins lists them)")
        return
    node, line = reader.resolve(node, trainer.lineno if trainer is not None else None)
    items = node.elts if isinstance(node, ast.List | ast.Tuple) else [node]
    config_dir = config.absolute().parent
    script = os.path.relpath(reader.path.absolute(), config_dir)
    why = _runs_on_import(reader)
    local: list[str] = []
    if why is not None:  # the functions go to a module of their own, beside the config
        module = config_dir / f"{config.name.split('.')[0]}_rewards.py"  # x.rlvr.yaml: x_
        script = os.path.relpath(module, config_dir)
    for item in items:
        target = reader.value(item, line)
        name = item.id if isinstance(item, ast.Name) else None
        dotted = dotted_name(item)
        if name is not None and name in reader.functions and target is item:
            function = f"{script}:{name}"
            local.append(name)
        elif name is not None and name in reader.imports and ":" in reader.imports[name]:
            function = reader.imports[name]
        elif dotted is not None and "." in dotted and dotted.split(".")[0] in reader.imports:
            head, _, attr = dotted.rpartition(".")
            package = reader.imports[head.split(".")[0]].replace(":", ".")
            function = f"{package}{head[len(head.split('.')[0]) :]}:{attr}"
        else:
            ok, value = reader.literal(item, line)
            if ok and isinstance(value, str):  # a reward model, as TRL loads a string
                label = re.sub(r"\W", "_", value.rstrip("/").split("/")[-1])
                model = {"name": "reward_model", "label": label, "params": {"model": value}}
                out.rewards.append(model)
                continue
            if name is not None and name in reader.nested:
                what = f"{name} is defined inside a function: move it to the top level"
            else:
                what = f"{reader.text(item)}: not a function defined or imported by name"
            out.todo("rewards", f"reward_funcs item {what}")
            continue
        label = function.rpartition(":")[2].rpartition(".")[2]
        params: dict[str, Any] = {"function": function}
        if name is not None and name in reader.functions and _reads_messages(reader, name):
            params["format"] = "conversational"  # see render()
        out.rewards.append({"name": "callable", "label": label, "params": params})
    if why is not None and local:
        out.module = (module, _extract(reader, local))
        out.notes.append(
            f"the reward functions ({', '.join(local)}) and what they use are copied to "
            f"{script}, which the config points at: importing {reader.path.name} would run "
            f"it ({why}); edit them there"
        )
    weights = out.trl.pop("reward_weights", None)
    if weights is not None:
        if isinstance(weights, list) and len(weights) == len(out.rewards):
            for entry, weight in zip(out.rewards, weights, strict=True):
                entry["weight"] = weight
        else:
            out.todo("rewards", f"reward_weights={weights!r}: set each reward's weight")


def _runs_on_import(reader: Reader) -> str | None:
    """Why importing the script (as a reward worker imports a ``callable``'s file) would run
    more than definitions, or None: its top level holds only imports of installed modules,
    functions, classes, literal assignments and an ``if __name__ == "__main__":`` block."""
    for stmt in reader.tree.body:
        where = f"line {stmt.lineno}: {reader.text(stmt).splitlines()[0]}"
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            if isinstance(stmt, ast.ImportFrom) and stmt.level:
                return f"{where} is a relative import"
            names = (
                [stmt.module or ""]
                if isinstance(stmt, ast.ImportFrom)
                else [alias.name for alias in stmt.names]
            )
            for name in names:
                if importlib.util.find_spec(name.split(".")[0]) is None:
                    return f"it imports {name}, which is not installed here"
        elif isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        elif isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
            if not reader.literal(stmt.value, stmt.lineno)[0]:
                return f"{where} runs"
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # a docstring
        elif not _is_main_guard(stmt):
            return f"{where} runs"
    return None


def _is_main_guard(stmt: ast.stmt) -> bool:
    test = stmt.test if isinstance(stmt, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def _extract(reader: Reader, names: list[str]) -> str:
    """A module holding the top-level functions ``names`` and every top-level import,
    function, class and assignment they use (transitively), in the script's order."""
    defined: dict[str, ast.stmt] = {}
    for stmt in reader.tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    defined[target.id] = stmt
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            defined[stmt.target.id] = stmt
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            for alias in stmt.names:
                defined[alias.asname or alias.name.split(".")[0]] = stmt
    keep: set[int] = set()
    aliases: dict[int, set[str]] = {}  # import statement -> the names it must still bind
    pending = list(names)
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen or name not in defined:
            continue  # a builtin, or a name bound elsewhere
        seen.add(name)
        stmt = defined[name]
        keep.add(id(stmt))
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            aliases.setdefault(id(stmt), set()).add(name)
            continue
        pending += [
            n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        ]
    lines = reader.source.splitlines()
    imports, code = [], []
    for stmt in reader.tree.body:
        if id(stmt) not in keep:
            continue
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            wanted = aliases[id(stmt)]
            kept = [a for a in stmt.names if (a.asname or a.name.split(".")[0]) in wanted]
            stmt = copy.copy(stmt)
            stmt.names = kept
            imports.append(ast.unparse(stmt))
            continue
        decorators = getattr(stmt, "decorator_list", [])
        start = min([d.lineno for d in decorators] + [stmt.lineno])
        code.append("\n".join(lines[start - 1 : stmt.end_lineno]))
    head = (
        f'"""The reward functions of {reader.path.name} and what they use, copied by\n'
        "rlvr import-trl (importing the script itself would run it). Edit them here:\n"
        'the config points at this file."""'
    )
    blocks = [head, "\n".join(imports)] if imports else [head]
    return "\n\n".join(blocks) + "\n\n\n" + "\n\n\n".join(code) + "\n"


def _reads_messages(reader: Reader, name: str) -> bool:
    """Whether the top-level function ``name`` indexes something with ``["content"]``."""
    for node in reader.tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return any(
                isinstance(n, ast.Subscript)
                and isinstance(n.slice, ast.Constant)
                and n.slice.value == "content"
                for n in ast.walk(node)
            )
    return False
