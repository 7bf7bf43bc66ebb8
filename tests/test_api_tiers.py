"""The public API's tiers (docs/reference/api.md): ``rlvr`` for scripts, ``rlvr.plugin`` for
plugin authors, ``rlvr.functional`` and ``rlvr.testing``; ``rlvr._builtin`` for what only the
built-in plugins use. No name is in two of them, and a public name earns its place by a use
outside the built-in plugins (a doc, an example, a scaffold template, a script or a test), found
by scanning those files, not from a hand-kept list.
"""

from __future__ import annotations

import ast
import importlib
import itertools
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TIERS = ("rlvr", "rlvr.plugin", "rlvr.functional", "rlvr.testing", "rlvr._builtin")
#: The two tiers whose names must be used outside the built-ins.
GATHERED = ("rlvr", "rlvr.plugin")
#: The pages generated from ``__all__`` (they list every name, so they prove no use).
GENERATED = {REPO / "docs" / "reference" / "api.md"}


def exported(tier: str) -> set[str]:
    return set(importlib.import_module(tier).__all__) - {"__version__"}


def python_uses(source: str, tier: str) -> set[str]:
    """The names of ``tier`` a Python source uses: ``from tier import name`` or
    ``tier.name`` (``rlvr.plugin.Reward``, after ``import rlvr.plugin``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a template with placeholders, or a fragment in a doc
        return set()
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == tier and not node.level:
            used |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Attribute) and ast.unparse(node.value) == tier:
            used.add(node.attr)
    return used


def markdown_uses(text: str, tier: str) -> set[str]:
    """The names of ``tier`` a page uses: in its Python code blocks, or named in prose as
    ``tier.name`` (```rlvr.plugin.RunInfo```)."""
    used = set()
    for block in re.findall(r"```(?:python|py)\n(.*?)```", text, re.S):
        used |= python_uses(block, tier)
    used |= set(re.findall(rf"`{re.escape(tier)}\.(\w+)(?![\w.])", text))
    return used


def consumer_files() -> list[Path]:
    """What uses rlvr from outside: docs, README, examples, bench scripts, the scaffold
    templates and the tests (but this file, which names every tier to check it)."""
    roots = ["docs", "examples", "bench", "tests", "core/cli/templates"]
    files = [REPO / "README.md"]
    for root in roots:
        files += [p for p in (REPO / root).rglob("*") if p.suffix in (".py", ".md")]
    skip = GENERATED | {Path(__file__).resolve()}
    return [p for p in files if p.resolve() not in skip and "_build" not in p.parts]


def uses_outside_builtins(tier: str) -> set[str]:
    used: set[str] = set()
    for path in consumer_files():
        text = path.read_text(encoding="utf-8")
        used |= markdown_uses(text, tier) if path.suffix == ".md" else python_uses(text, tier)
    return used


def test_no_name_is_in_two_tiers():
    for a, b in itertools.combinations(TIERS, 2):
        both = exported(a) & exported(b)
        assert not both, f"in both {a} and {b}: {sorted(both)}"


@pytest.mark.parametrize("tier", TIERS)
def test_every_tier_declares_its_names(tier):
    module = importlib.import_module(tier)
    assert module.__all__, f"{tier} has no __all__"
    assert all(hasattr(module, name) for name in module.__all__)


@pytest.mark.parametrize("tier", GATHERED)
def test_every_public_name_is_used_outside_the_builtin_plugins(tier):
    unused = exported(tier) - uses_outside_builtins(tier)
    assert not unused, (
        f"{tier}.__all__ holds names only built-in plugins use: {sorted(unused)}; move them to "
        "rlvr._builtin (or into the plugin), or use them in a doc, example or template"
    )


def test_every_builtin_helper_is_used_by_a_builtin_plugin():
    """rlvr._builtin is no dumping ground: a helper no built-in uses goes."""
    used: set[str] = set()
    for path in (REPO / "plugins").rglob("*.py"):
        used |= python_uses(path.read_text(encoding="utf-8"), "rlvr._builtin")
    assert exported("rlvr._builtin") - used == set()


def test_the_scan_finds_imports_attributes_and_prose():
    assert python_uses("from rlvr.plugin import Reward, Sample as S", "rlvr.plugin") == {
        "Reward",
        "Sample",
    }
    assert python_uses("import rlvr.plugin\nrlvr.plugin.RunInfo(1, 2)", "rlvr.plugin") == {
        "RunInfo"
    }
    assert python_uses("from rlvr import train", "rlvr.plugin") == set()
    page = "Use `rlvr.plugin.Params`.\n\n```python\nfrom rlvr import train\n```\n"
    assert markdown_uses(page, "rlvr.plugin") == {"Params"}
    assert markdown_uses(page, "rlvr") == {"train"}
