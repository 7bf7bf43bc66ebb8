"""A TRL script's ``train_dataset``, followed back to ``load_dataset("...")``, as ``data.path``
(and ``data.split``), with a TODO where the script changes the rows."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from rlvr.compat.trl.script import (
    DATASET_METHODS,
    Reader,
    Script,
    argument,
    called,
)

_BUILDERS = {"json": ".jsonl", "parquet": ".parquet", "csv": None, "text": None}


def read_data(reader: Reader, trainer: ast.Call | None, out: Script, config_dir: Path) -> None:
    node = argument(trainer, "train_dataset", 3) if trainer is not None else None
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
        elif isinstance(node, ast.Call) and called(node) in DATASET_METHODS:
            assert isinstance(node.func, ast.Attribute)
            changed.append(node)
            node = node.func.value
        else:
            break
    if called(node) != "load_dataset":
        out.todo(
            "data",
            f"train_dataset={reader.text(node)} is not read from load_dataset("
            "...): set data.path, or pass the rows to rlvr.Trainer(dataset=...)",
        )
        return
    assert isinstance(node, ast.Call)
    first = argument(node, "path", 0)
    ok, path = reader.literal(first, node.lineno) if first is not None else (False, None)
    if not ok or not isinstance(path, str):
        out.todo("data", f"{reader.text(node)}: no dataset name to read; set data.path")
        return
    files = argument(node, "data_files", None)
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
        if argument(node, "name", 1) is not None:
            out.todo(
                "data",
                f"{reader.text(node)} names a dataset config: rlvr loads the "
                "default one; point data.path at a local copy of the one you need",
            )
    split_node = argument(node, "split", None)
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
