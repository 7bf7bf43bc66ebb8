"""Every reference in the code's docstrings and comments resolves: Sphinx-style roles naming an
``rlvr`` object (``:func:`rlvr.x.y```), and repository files (``docs/....md``)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*ROOT.glob("core/**/*.py"), *ROOT.glob("plugins/**/*.py")])
ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|exc):`~?(rlvr(?:\.\w+)+)`")
DOC_FILE = re.compile(r"\bdocs/[\w/.-]+\.md\b")


def resolve(dotted: str) -> object:
    """The object ``dotted`` names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ModuleNotFoundError(dotted)


def references() -> list[tuple[str, str]]:
    found = []
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        rel = str(path.relative_to(ROOT))
        found += [(rel, m) for m in ROLE.findall(text.replace("\n    ", " "))]
    return found


def test_the_scan_finds_references():
    assert len(references()) > 30  # the regex still matches how the code writes them


@pytest.mark.parametrize(("source", "target"), sorted(set(references())))
def test_docstring_reference_resolves(source, target):
    try:
        resolve(target)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{source}: {target} does not resolve ({exc})")


def test_referenced_doc_files_exist():
    missing = [
        (str(path.relative_to(ROOT)), name)
        for path in SOURCES
        for name in DOC_FILE.findall(path.read_text(encoding="utf-8"))
        if not (ROOT / name).is_file()
    ]
    assert missing == []
