"""Write ``tests/trl_grpo_fields.txt``: the field names of TRL's ``GRPOConfig``, read from
TRL's source without installing or importing it (``ast``), plus those it inherits from
transformers' ``TrainingArguments`` (installed here). ``tests/test_trl_keys.py`` checks that
:data:`rlvr.compat.trl.keys.TRL_KEYS` decides every one of them. Also
``tests/trl_grpo_defaults.json``: the defaults of the fields in
:data:`rlvr.compat.trl.paste.TRL_DEFAULTS` as TRL declares them, which the same test compares
with that table.

    python tests/trl_fields.py .whl/trl-1.16.0-py3-none-any.whl   # or an unpacked trl/ dir
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import sys
import zipfile
from pathlib import Path

import transformers

from rlvr.compat.trl.paste import TRL_DEFAULTS

SNAPSHOT = Path(__file__).with_name("trl_grpo_fields.txt")
DEFAULTS = Path(__file__).with_name("trl_grpo_defaults.json")
#: The classes of TRL's GRPOConfig hierarchy above TrainingArguments, and their files.
SOURCES = {"GRPOConfig": "trl/trainer/grpo_config.py", "_BaseConfig": "trl/trainer/base_config.py"}


def _read(source: Path, member: str) -> str:
    if source.suffix == ".whl":
        with zipfile.ZipFile(source) as wheel:
            return wheel.read(member).decode()
    root = source if source.name != "trl" else source.parent
    return (root / member).read_text(encoding="utf-8")


def _version(source: Path) -> str:
    found = re.search(r"trl-([^-]+)-", source.name)
    if found:
        return found.group(1)
    try:
        text = _read(source, "trl/__init__.py")
    except FileNotFoundError:
        return "unknown"
    match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
    return match.group(1) if match else "unknown"


def class_fields(text: str, name: str) -> list[str]:
    """The annotated class attributes (dataclass fields) of class ``name`` in ``text``."""
    tree = ast.parse(text)
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return [
        n.target.id
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    ]


def class_defaults(text: str, name: str) -> dict[str, object]:
    """The literal defaults (``x: int = 3`` or ``field(default=3, ...)``) of class ``name``."""
    tree = ast.parse(text)
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    out: dict[str, object] = {}
    for n in cls.body:
        if not (isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value):
            continue
        value = n.value
        if isinstance(value, ast.Call):
            given = [k.value for k in value.keywords if k.arg == "default"]
            if not given:
                continue
            value = given[0]
        try:
            out[n.target.id] = ast.literal_eval(value)
        except ValueError:
            continue
    return out


def grpo_defaults(source: Path, keys: list[str]) -> dict[str, object]:
    """``keys``' defaults in ``GRPOConfig``: its own class's, else its base's, else
    TrainingArguments'."""
    found = {f.name: f.default for f in dataclasses.fields(transformers.TrainingArguments)}
    for cls, member in reversed(SOURCES.items()):
        found.update(class_defaults(_read(source, member), cls))
    return {k: found[k] for k in keys}


def grpo_fields(source: Path) -> set[str]:
    """Every field of ``GRPOConfig`` as ``dataclasses.fields`` would list them."""
    names = {f.name for f in dataclasses.fields(transformers.TrainingArguments)}
    for cls, member in SOURCES.items():
        names.update(class_fields(_read(source, member), cls))
    return names


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    source = Path(argv[0])
    header = (
        f"# TRL {_version(source)} GRPOConfig fields (transformers {transformers.__version__} "
        "TrainingArguments included), written by tests/trl_fields.py\n"
    )
    SNAPSHOT.write_text(header + "".join(f"{n}\n" for n in sorted(grpo_fields(source))))
    print(f"wrote {SNAPSHOT}")
    record = {"trl": _version(source), **grpo_defaults(source, sorted(TRL_DEFAULTS))}
    DEFAULTS.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {DEFAULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
