"""A TRL script as read, never run: :class:`Script`, what the reading found, and
:class:`Reader`, the script's syntax tree with each name's assignments and imports (names are
followed back through plain assignments); and the helpers that pick a call's arguments."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.api.errors import RlvrError

#: LoraConfig's arguments and their ``model.lora`` keys.
LORA_KEYS = {
    "r": "r",
    "lora_alpha": "alpha",
    "lora_dropout": "dropout",
    "target_modules": "target_modules",
    "modules_to_save": "modules_to_save",
    "use_rslora": "use_rslora",
    "layers_to_transform": "layers_to_transform",
}
#: LoraConfig arguments that ask for what rlvr does anyway.
LORA_INERT = {"task_type": ("CAUSAL_LM",), "bias": ("none",), "inference_mode": (False,)}
#: GRPOTrainer's leading positional parameters.
TRAINER_ARGS = ("model", "reward_funcs", "args", "train_dataset", "eval_dataset")
#: Dataset methods that return the dataset changed (rlvr reads the rows as they are stored).
DATASET_METHODS = {
    "map",
    "filter",
    "select",
    "shuffle",
    "rename_column",
    "rename_columns",
    "remove_columns",
    "select_columns",
    "cast",
    "cast_column",
    "flatten",
    "train_test_split",
    "with_format",
}


@dataclass
class Script:
    """What was read from a script: the config sections, and what needs attention."""

    path: Path
    model: str | None = None
    lora: dict[str, Any] | None = None
    data: dict[str, Any] = field(default_factory=dict)
    rewards: list[dict[str, Any]] = field(default_factory=list)
    trl: dict[str, Any] = field(default_factory=dict)
    #: ``trl:`` keys written as comments: key -> (value as written, why)
    trl_comments: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: per section (model, data, rewards, trl): TODO lines written into the YAML
    todos: dict[str, list[str]] = field(default_factory=dict)
    #: what was done that the user should know (comments under rewards:, and the report)
    notes: list[str] = field(default_factory=list)
    #: a module of the script's reward functions to write: (path, source)
    module: tuple[Path, str] | None = None

    def todo(self, section: str, message: str) -> None:
        self.todos.setdefault(section, []).append(message)


def dotted_name(node: ast.expr) -> str | None:
    """``a.b.c`` of a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def called(node: ast.expr) -> str | None:
    """The last name of a call's function (``GRPOConfig``, ``from_pretrained``), else None."""
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


class Reader:
    """The script's syntax tree, with each name's assignments and imports, in source order."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise RlvrError(f"cannot read {str(path)!r}: {exc}") from None
        try:
            self.tree = ast.parse(source, filename=str(path))
        except SyntaxError as exc:
            raise RlvrError(
                f"{str(path)!r} line {exc.lineno}: SyntaxError: {exc.msg}; rlvr import-trl "
                "reads a script that Python can parse"
            ) from None
        self.source = source
        self.assigns: dict[str, list[tuple[int, ast.expr]]] = {}
        self.functions: set[str] = set()  # defined at the top level
        self.nested: set[str] = set()  # defined inside a function or class
        self.imports: dict[str, str] = {}  # local name -> module:name or module
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.assigns.setdefault(target.id, []).append((node.lineno, node.value))
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                if isinstance(node.target, ast.Name):
                    self.assigns.setdefault(node.target.id, []).append((node.lineno, node.value))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                (self.functions if node in self.tree.body else self.nested).add(node.name)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = f"{node.module}:{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    self.imports[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0]
                    )
        for values in self.assigns.values():
            values.sort(key=lambda item: item[0])

    def text(self, node: ast.AST) -> str:
        """The source of ``node``, on one line, shortened."""
        text = " ".join((ast.get_source_segment(self.source, node) or "?").split())
        return text if len(text) <= 80 else text[:77] + "..."

    def calls(self, name: str) -> list[ast.Call]:
        """Every call of ``name`` (as ``name(...)`` or ``x.name(...)``), in source order."""
        found = [n for n in ast.walk(self.tree) if isinstance(n, ast.Call) and called(n) == name]
        return sorted(found, key=lambda n: (n.lineno, n.col_offset))

    def resolve(self, node: ast.expr, before: int | None) -> tuple[ast.expr, int | None]:
        """``(value, line)``: ``node``, a name followed back to the value it was last given
        before line ``before`` (plain assignments only), and the line of that assignment
        (where the names in the value are to be followed back from)."""
        for _ in range(20):
            if not isinstance(node, ast.Name):
                break
            earlier = [
                (n, v) for n, v in self.assigns.get(node.id, []) if before is None or n < before
            ]
            if not earlier:
                break
            before, node = earlier[-1]
        return node, before

    def value(self, node: ast.expr, before: int | None) -> ast.expr:
        return self.resolve(node, before)[0]

    def literal(self, node: ast.expr, before: int | None) -> tuple[bool, Any]:
        """``(True, value)`` for a literal (names followed back), else ``(False, None)``."""
        try:
            return True, ast.literal_eval(self.value(node, before))
        except (ValueError, TypeError, SyntaxError, RecursionError):
            return False, None


def keywords(call: ast.Call) -> Iterator[tuple[str | None, ast.expr]]:
    for kw in call.keywords:
        yield kw.arg, kw.value


def argument(call: ast.Call, name: str, position: int | None) -> ast.expr | None:
    for key, value in keywords(call):
        if key == name:
            return value
    if position is not None and len(call.args) > position:
        return call.args[position]
    return None
