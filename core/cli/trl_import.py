"""``rlvr init`` and ``rlvr import-trl``: a run config from scratch, or from a TRL script.

``rlvr import-trl SCRIPT.py`` reads a TRL GRPO training script's syntax tree; it never runs
the script (nor imports it). From it:

- the ``GRPOConfig(...)`` keyword arguments go, as written, under ``trl:`` (TRL's keys and
  units, which rlvr translates); a value that is not a literal (``args.lr``) becomes a TODO
  comment, as does every key that rlvr ignores (with why) or rejects (with the fix), so the
  config validates;
- the model from ``GRPOTrainer(model=...)``, a string or a ``from_pretrained("...")``;
  ``peft_config=LoraConfig(...)`` becomes ``model.lora``;
- ``reward_funcs=[...]``: each function defined in the script becomes a ``callable`` reward
  entry pointing at ``SCRIPT.py:name``, each imported one at ``module:name`` (with ``format:
  conversational`` when the function reads ``completion[0]["content"]``), each string (a
  model path or hub id, which TRL loads as a reward model) a ``reward_model`` entry; GRPOConfig's
  ``reward_weights`` become the entries' weights. A reward worker imports the file a
  ``callable`` names, so when importing the script would run more than definitions (a TRL
  script usually trains at its top level, or imports trl where it is not installed), its
  reward functions and what they use are copied to ``CONFIG_rewards.py`` beside the config,
  and the entries point there;
- ``train_dataset``, followed back to ``load_dataset("...")``, becomes ``data.path`` (and
  ``data.split``), with a TODO where the script changes the rows (``.map(...)``).

Names are followed back through plain assignments (``model_name = "Qwen/..."``). What cannot be
read this way is a TODO line in the YAML and a line of the report.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import os
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlvr.api.errors import RlvrError
from rlvr.api.host import PluginHost
from rlvr.config.schema import DEFAULT_ALGORITHM, DEFAULT_BACKEND, ConfigError, validate
from rlvr.config.trl import TRL_SECTION

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


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` of a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _called(node: ast.expr) -> str | None:
    """The last name of a call's function (``GRPOConfig``, ``from_pretrained``), else None."""
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


class _Reader:
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
        found = [n for n in ast.walk(self.tree) if isinstance(n, ast.Call) and _called(n) == name]
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


def _keywords(call: ast.Call) -> Iterator[tuple[str | None, ast.expr]]:
    for kw in call.keywords:
        yield kw.arg, kw.value


def _argument(call: ast.Call, name: str, position: int | None) -> ast.expr | None:
    for key, value in _keywords(call):
        if key == name:
            return value
    if position is not None and len(call.args) > position:
        return call.args[position]
    return None


# --------------------------------------------------------------------------- reading


def read_script(path: str | Path, config: str | Path) -> Script:
    """What ``path`` (a TRL GRPO script) says, for a config to be written at ``config`` (the
    reward functions' file paths are relative to its directory)."""
    script_path = Path(path)
    config_dir = Path(config).absolute().parent
    reader = _Reader(script_path)
    out = Script(script_path)
    trainers = reader.calls("GRPOTrainer")
    trainer = trainers[0] if trainers else None
    if trainer is None:
        out.todo("model", "no GRPOTrainer(...) call found: fill in model, data and rewards")
    if len(trainers) > 1:
        out.todo(
            "model",
            f"{len(trainers)} GRPOTrainer calls: the first (line "
            f"{trainer.lineno if trainer else '?'}) was read",
        )
    _read_config(reader, trainer, out)
    _read_model(reader, trainer, out)
    _read_lora(reader, trainer, out)
    _read_rewards(reader, trainer, out, Path(config))
    _read_data(reader, trainer, out, config_dir)
    return out


def _grpo_config(reader: _Reader, trainer: ast.Call | None) -> ast.Call | None:
    if trainer is not None:
        args = _argument(trainer, "args", 2)
        if args is not None:
            node = reader.value(args, trainer.lineno)
            if _called(node) == "GRPOConfig":
                assert isinstance(node, ast.Call)
                return node
    calls = reader.calls("GRPOConfig")
    return calls[0] if calls else None


def _read_config(reader: _Reader, trainer: ast.Call | None, out: Script) -> None:
    config = _grpo_config(reader, trainer)
    if config is None:
        parsed = reader.calls("TrlParser") or reader.calls("HfArgumentParser")
        how = (
            "the script takes its GRPOConfig from the command line (TrlParser): put those "
            "values under trl:"
            if parsed
            else "no GRPOConfig(...) found: put the training settings under trl:"
        )
        out.todo(TRL_SECTION, how)
        return
    for arg in config.args:
        out.todo(TRL_SECTION, f"positional argument {reader.text(arg)} of GRPOConfig not read")
    for key, value in _keywords(config):
        if key is None:
            out.todo(TRL_SECTION, f"**{reader.text(value)} of GRPOConfig not read: add its keys")
            continue
        ok, literal = reader.literal(value, config.lineno)
        if ok:
            out.trl[key] = literal
        else:
            out.trl_comments[key] = (reader.text(value), "TODO: not a literal; give its value")


def _read_model(reader: _Reader, trainer: ast.Call | None, out: Script) -> None:
    node = _argument(trainer, "model", 0) if trainer is not None else None
    if node is None:
        loads = reader.calls("from_pretrained")
        if not loads:
            out.todo("model", "no model found: set model.name_or_path (a hub id or a directory)")
            return
        node = loads[0]
    line = trainer.lineno if trainer is not None else None
    resolved, line = reader.resolve(node, line)
    if _called(resolved) == "from_pretrained":
        assert isinstance(resolved, ast.Call)
        _read_model_kwargs(reader, resolved, out)
        first = _argument(resolved, "pretrained_model_name_or_path", 0)
        if first is None:
            out.todo("model", f"{reader.text(resolved)}: no model name to read")
            return
        line, node = resolved.lineno, first
    else:
        node = resolved
    ok, value = reader.literal(node, line)
    if ok and isinstance(value, str):
        out.model = value
    else:
        out.todo("model", f"model={reader.text(node)} is not a literal: set model.name_or_path")


#: from_pretrained's keyword arguments that GRPOConfig's model_init_kwargs takes (rlvr: model.*).
MODEL_KWARGS = ("dtype", "torch_dtype", "attn_implementation", "revision", "trust_remote_code")


def _read_model_kwargs(reader: _Reader, call: ast.Call, out: Script) -> None:
    """``from_pretrained(name, torch_dtype=torch.bfloat16, ...)``: what TRL's
    ``model_init_kwargs`` would say, added to it."""
    kwargs: dict[str, Any] = {}
    for key, value in _keywords(call):
        dotted = _dotted(value)
        ok, literal = reader.literal(value, call.lineno)
        if key in MODEL_KWARGS and (ok or dotted is not None):
            kwargs[key] = literal if ok else str(dotted).rpartition(".")[2]
        elif key == "device_map" and ok and literal is None:
            continue  # asks for nothing
        elif key != "pretrained_model_name_or_path":
            shown = f"{key}={reader.text(value)}" if key else reader.text(value)
            out.todo(
                "model",
                f"from_pretrained({shown}) not carried over: rlvr loads and places "
                "the model itself (model: takes dtype, attn_implementation, revision, "
                "trust_remote_code)",
            )
    if kwargs:
        given = out.trl.get("model_init_kwargs")
        out.trl["model_init_kwargs"] = {**kwargs, **(given if isinstance(given, dict) else {})}


def _read_lora(reader: _Reader, trainer: ast.Call | None, out: Script) -> None:
    node = _argument(trainer, "peft_config", None) if trainer is not None else None
    if node is None:
        return
    call = reader.value(node, trainer.lineno if trainer is not None else None)
    if _called(call) != "LoraConfig":
        out.todo("model", f"peft_config={reader.text(node)} is no LoraConfig(...): set model.lora")
        return
    assert isinstance(call, ast.Call)
    lora: dict[str, Any] = {}
    for key, value in _keywords(call):
        ok, literal = reader.literal(value, call.lineno)
        if key in LORA_KEYS and ok:
            lora[LORA_KEYS[key]] = literal
        elif key in LORA_INERT and ok and literal in LORA_INERT[key]:
            continue
        else:
            out.todo(
                "model",
                f"LoraConfig({reader.text(value) if key is None else key}=...) "
                "not carried over: see model.lora's keys (rlvr validate --print)",
            )
    out.lora = lora


def _read_rewards(reader: _Reader, trainer: ast.Call | None, out: Script, config: Path) -> None:
    node = _argument(trainer, "reward_funcs", 1) if trainer is not None else None
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
        dotted = _dotted(item)
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


def _runs_on_import(reader: _Reader) -> str | None:
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


def _extract(reader: _Reader, names: list[str]) -> str:
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


def _reads_messages(reader: _Reader, name: str) -> bool:
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


_BUILDERS = {"json": ".jsonl", "parquet": ".parquet", "csv": None, "text": None}


def _read_data(reader: _Reader, trainer: ast.Call | None, out: Script, config_dir: Path) -> None:
    node = _argument(trainer, "train_dataset", 3) if trainer is not None else None
    line = trainer.lineno if trainer is not None else None
    if node is None:
        loads = reader.calls("load_dataset")
        if not loads:
            out.todo("data", "no dataset found: set data.path (a .jsonl file or hub dataset)")
            return
        node = loads[0]
    changed: list[ast.Call] = []
    split: str | None = None
    for _ in range(20):  # walk back through .map(...), ds["train"] and names
        node, line = reader.resolve(node, line)
        if isinstance(node, ast.Subscript):
            ok, key = reader.literal(node.slice, line)
            if ok and isinstance(key, str):
                split = split or key
            node = node.value
        elif isinstance(node, ast.Call) and _called(node) in DATASET_METHODS:
            assert isinstance(node.func, ast.Attribute)
            changed.append(node)
            node = node.func.value
        else:
            break
    if _called(node) != "load_dataset":
        out.todo(
            "data",
            f"train_dataset={reader.text(node)} is not read from load_dataset("
            "...): set data.path, or pass the rows to rlvr.Trainer(dataset=...)",
        )
        return
    assert isinstance(node, ast.Call)
    first = _argument(node, "path", 0)
    ok, path = reader.literal(first, node.lineno) if first is not None else (False, None)
    if not ok or not isinstance(path, str):
        out.todo("data", f"{reader.text(node)}: no dataset name to read; set data.path")
        return
    files = _argument(node, "data_files", None)
    if path in _BUILDERS and files is not None:
        ok, value = reader.literal(files, node.lineno)
        if ok and isinstance(value, str):
            local = Path(value)
            if local.is_absolute():
                out.data["path"] = value
            else:  # as the script would find it: run from its directory
                local = reader.path.absolute().parent / local
                out.data["path"] = os.path.relpath(local, config_dir.absolute())
                out.todo(
                    "data",
                    f"data.path is {reader.text(node)}'s data_files, taken relative "
                    "to the script's directory: check it",
                )
        else:
            out.todo("data", f"{reader.text(node)}: set data.path to the data file(s)")
    else:
        out.data["path"] = path
        out.todo(
            "data",
            f"from {reader.text(node)}: rlvr reads the prompts from the column "
            "data.prompt_field (default: prompt)",
        )
        if _argument(node, "name", 1) is not None:
            out.todo(
                "data",
                f"{reader.text(node)} names a dataset config: rlvr loads the "
                "default one; point data.path at a local copy of the one you need",
            )
    split_node = _argument(node, "split", None)
    if split_node is not None:
        ok, value = reader.literal(split_node, node.lineno)
        if ok and isinstance(value, str):
            split = value
    if split is not None and out.data.get("path") == path:
        out.data["split"] = split
    source: dict[str, str] = {}  # a column's name after the script's renames -> as stored
    for change in reversed(changed):  # in the order the script applies them
        copies = _column_copies(change)
        if copies is not None:
            source |= {new: source.get(old, old) for new, old in copies.items()}
            if all(new == "prompt" or new == old for new, old in copies.items()):
                continue
        out.todo(
            "data",
            f"the script changes the rows ({reader.text(change)}); rlvr reads them as "
            "stored: save the changed rows to a .jsonl file for data.path, or use "
            "rlvr.Trainer(dataset=...)",
        )
    if source.get("prompt", "prompt") != "prompt":
        out.data["prompt_field"] = source["prompt"]


def _column_copies(call: ast.Call) -> dict[str, str] | None:
    """``{new: old}`` when ``call`` only renames or copies columns (``rename_column("q",
    "prompt")``, ``rename_columns({...})``, ``map(lambda x: {"prompt": x["q"]})``), else None:
    a prompt column read under another name is ``data.prompt_field``, not a changed row."""
    assert isinstance(call.func, ast.Attribute)
    method, args = call.func.attr, call.args
    strings = [a.value for a in args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if method == "rename_column" and len(strings) == len(args) == 2 and not call.keywords:
        return {strings[1]: strings[0]}
    if method == "rename_columns" and len(args) == 1 and isinstance(args[0], ast.Dict):
        pairs = _string_pairs(args[0])
        return None if pairs is None else {new: old for old, new in pairs.items()}
    if method != "map" or len(args) != 1 or call.keywords or not isinstance(args[0], ast.Lambda):
        return None
    fn = args[0]
    if len(fn.args.args) != 1 or not isinstance(fn.body, ast.Dict):
        return None
    row, out = fn.args.args[0].arg, {}
    for key, value in zip(fn.body.keys, fn.body.values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            return None
        if not (
            isinstance(value, ast.Subscript)
            and isinstance(value.value, ast.Name)
            and value.value.id == row
            and isinstance(value.slice, ast.Constant)
            and isinstance(value.slice.value, str)
        ):
            return None
        out[key.value] = value.slice.value
    return out


def _string_pairs(node: ast.Dict) -> dict[str, str] | None:
    pairs: dict[str, str] = {}
    for key, value in zip(node.keys, node.values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(value, ast.Constant)):
            return None
        if not (isinstance(key.value, str) and isinstance(value.value, str)):
            return None
        pairs[key.value] = value.value
    return pairs


# --------------------------------------------------------------------------- writing


def _value(value: Any) -> str:
    """``value`` as one line of YAML."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, allow_unicode=True)
    return text.removesuffix("\n").removesuffix("\n...").strip()


def _sections(script: Script) -> dict[str, Any]:
    data: dict[str, Any] = {"model": {"name_or_path": script.model}}
    if script.lora is not None:
        data["model"]["lora"] = script.lora
    data["data"] = dict(script.data) or {"path": None}
    data["rewards"] = script.rewards
    data[TRL_SECTION] = dict(script.trl)
    return data


#: The sections rlvr train needs (algorithm and backend get their defaults).
REQUIRE = ("model", "data", "rewards", "algorithm", "backend")


def check(script: Script, host: PluginHost, config_dir: Path) -> list[str]:
    """Validate the config as ``rlvr validate`` does before reading files and models: each
    ``trl:`` key rlvr ignores or rejects becomes a comment saying why (so the config
    validates); returns what else is wrong, one line each."""
    left: list[str] = []
    for _ in range(len(script.trl) + 1):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                validate(_sections(script), host, require=REQUIRE, config_dir=config_dir)
                problems: list[tuple[str, str]] = []
            except ConfigError as exc:
                problems = exc.problems
        moved = False
        for w in caught:
            key, _, why = str(w.message).partition(" is ignored: ")
            key = key.removeprefix(f"{TRL_SECTION}.")
            if why and key in script.trl:
                script.trl_comments[key] = (_value(script.trl.pop(key)), f"ignored: {why}")
                moved = True
        for path, message in problems:
            key = path.removeprefix(f"{TRL_SECTION}.").split(".")[0]
            if path.startswith(f"{TRL_SECTION}.") and key in script.trl:
                script.trl_comments[key] = (_value(script.trl.pop(key)), f"TODO: {message}")
                moved = True
        left = [f"{p}: {m}" for p, m in problems if not p.startswith(f"{TRL_SECTION}.")]
        left += [str(w.message) for w in caught if " is ignored: " not in str(w.message)]
        if not moved:
            break
    return left


def render(script: Script, command: str) -> str:
    """The config YAML: the sections, and TODO comments where the script said no more."""
    lines = [
        f"# Written by `{command}` from the script's text (the script was not run).",
        "# Check the TODO lines, then: rlvr validate THIS.yaml && rlvr train THIS.yaml (with",
        "# --allow-code when its rewards are the script's functions: `callable` runs them)",
    ]

    def todos(section: str, indent: str) -> None:
        lines.extend(f"{indent}# TODO: {t}" for t in script.todos.get(section, []))

    lines += ["model:", f"  name_or_path: {_value(script.model)}"]
    if script.lora is not None:
        lines.append("  lora:  # from peft_config=LoraConfig(...)")
        lines += [f"    {k}: {_value(v)}" for k, v in script.lora.items()]
    todos("model", "  ")
    lines.append("data:")
    lines += [f"  {k}: {_value(v)}" for k, v in (dict(script.data) or {"path": None}).items()]
    todos("data", "  ")
    lines.append("rewards:" + ("" if script.rewards else " []"))
    lines += [f"  # {note}" for note in script.notes]
    for entry in script.rewards:
        what = {
            "callable": "your function, called as TRL calls it",
            "reward_model": "a reward model, scored as TRL scores it",
        }.get(entry["name"], "")
        lines.append(f"  - name: {entry['name']}" + (f"  # {what}" if what else ""))
        lines += [f"    {k}: {_value(v)}" for k, v in entry.items() if k not in ("name", "params")]
        lines.append("    params:")
        for key, value in entry["params"].items():
            why = "  # it reads completion[0]['content']" if key == "format" else ""
            lines.append(f"      {key}: {_value(value)}{why}")
    todos("rewards", "  ")
    lines += [
        f"# algorithm: {DEFAULT_ALGORITHM} and backend: {DEFAULT_BACKEND} (transformers' "
        "generate) are the defaults;",
        "# trl: below picks the loss (loss_type) and vLLM (use_vllm: true).",
        f"{TRL_SECTION}:  # the script's GRPOConfig: TRL's keys and units (rlvr translates them)",
    ]
    lines += [f"  {k}: {_value(v)}" for k, v in script.trl.items()]
    lines += [f"  # {k}: {shown}  # {why}" for k, (shown, why) in script.trl_comments.items()]
    todos(TRL_SECTION, "  ")
    if lines[-1].startswith(f"{TRL_SECTION}:"):
        lines[-1] = f"{TRL_SECTION}: {{}}"
    return "\n".join(lines) + "\n"


def attention(script: Script, left: list[str]) -> list[str]:
    """One line per thing the user has to look at."""
    out = [t for section in script.todos.values() for t in section]
    out += [
        f"trl.{key}: {why.removeprefix('TODO: ')}"
        for key, (_, why) in script.trl_comments.items()
        if why.startswith("TODO")
    ]
    return out + left


# --------------------------------------------------------------------------- starter

STARTER = """\
# A starter rlvr config: GRPO on a dataset of questions with known answers.
# Fill in the TODOs, then: rlvr validate THIS.yaml && rlvr train THIS.yaml
# Every key and its default: rlvr validate THIS.yaml --print
model:
  name_or_path: Qwen/Qwen2.5-0.5B-Instruct  # TODO: a hub id, a local directory or a .gguf file
  # lora: {}                       # uncomment to train LoRA adapters (pip install 'rlvr[lora]')
data:
  path: data/train.jsonl           # TODO: a .jsonl/.json/.parquet file, a directory or a hub id
  prompt_field: prompt             # the column with the question (a string or chat messages)
  # system_prompt: "Answer inside <answer></answer>."
  # eval_path: data/test.jsonl     # held-out prompts for rlvr eval (and training.eval_steps)
rewards:
  - name: answer                   # 1 when the extracted answer equals the row's `answer`
    params: {gold_field: answer}   # TODO: the column with the gold answer
  - name: format                   # <think>...</think><answer>...</answer>
    weight: 0.5
  # - name: callable               # a TRL reward function, called as TRL calls it
  #   params: {function: "my_rewards.py:accuracy_reward"}
algorithm:
  name: grpo
  params:
    beta: 0.0                      # > 0 adds a KL term to a reference model (costs memory)
backend:
  name: hf                         # vllm: faster sampling on a GPU (pip install 'rlvr[vllm]')
training:
  output_dir: outputs/run          # relative paths resolve against this file's directory
  learning_rate: 1.0e-6
  per_device_train_batch_size: 8   # prompts per step (TRL counts completions)...
  num_generations: 8               # ...each sampled this many times
  max_completion_length: 256
  max_steps: 500
  save_steps: 100
  # eval_steps: 50                 # evaluate on data.eval_path during training
# A GRPOConfig from a TRL script can go under a top-level `trl:` section instead, with TRL's
# keys and units (rlvr import-trl SCRIPT.py writes one for you).
"""


def write(text: str, output: str | Path, *, force: bool) -> Path:
    """Write ``text`` to ``output`` (never over a file, unless ``force``)."""
    path = Path(output)
    if path.exists() and not force:
        raise RlvrError(f"{str(path)!r} exists; pass --force to replace it, or -o another path")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def import_trl(
    script: str | Path,
    output: str | Path,
    host: PluginHost,
    *,
    force: bool = False,
    command: str = "",
) -> tuple[Path, list[str]]:
    """Write the config for the TRL ``script`` to ``output``; return its path and the lines
    that need the user's attention."""
    out_dir = Path(output).absolute().parent
    if not Path(script).is_file():
        raise RlvrError(f"no file {str(script)!r} (rlvr import-trl SCRIPT.py)")
    if Path(output).exists() and not force:
        raise RlvrError(f"{str(output)!r} exists; pass --force to replace it, or -o another path")
    read = read_script(script, output)
    if read.module is not None:  # first: the config check reads it
        module, source = read.module
        if module.exists() and not force:
            raise RlvrError(
                f"{str(module)!r} exists; pass --force to replace it, or -o another path"
            )
        write(source, module, force=True)
    left = check(read, host, out_dir)
    text = render(read, command or f"rlvr import-trl {script}")
    return write(text, output, force=force), read.notes + attention(read, left)


__all__ = [
    "STARTER",
    "Script",
    "attention",
    "check",
    "import_trl",
    "read_script",
    "render",
    "write",
]
