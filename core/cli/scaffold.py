"""``rlvr new plugin``: write a ready-to-install plugin package.

:func:`new_plugin` writes ``rlvr-<name>/`` with a ``pyproject.toml`` (setuptools, a dependency
on rlvr, and the ``rlvr`` entry point that makes ``name: <name>`` usable in configs), a module
``rlvr_<name>`` holding one documented plugin of the chosen kind and its params model, a test
that runs rlvr's conformance checks (:mod:`rlvr.testing`), and a README. Right after
``pip install -e rlvr-<name>`` its tests pass and ``rlvr plugins`` lists it.

The files come from ``templates/plugin/`` (package data, linted with the rest of rlvr):
``common/`` for every kind, ``<kind>/`` for one; ``__NAME__``, ``__CLS__``, ``__MODULE__``,
``__DIST__``, ``__KIND__`` and ``__USE__`` (the kind's ``use.md``) are replaced in paths and
texts. Every kind has the layout of rlvr's own plugin families: ``__init__.py`` registers the
plugin (a ``LazyFactory`` names the implementation), ``params.py`` holds its params model, and
one module holds the implementation (``reward.py``, ``algorithm.py``, ``generator.py``,
``environment.py``),
imported only when a run builds it: registering the plugin (what ``rlvr plugins`` and ``rlvr
validate`` do) stays fast whatever the implementation imports.

Names are normalised as Python packaging does: ``acme-reward`` (or ``Acme.Reward``) is the
plugin ``acme_reward`` in configs, the package ``rlvr_acme_reward`` and the distribution
``rlvr-acme-reward``.
"""

from __future__ import annotations

import keyword
import re
import shutil
import tempfile
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from rlvr.api.host import PluginError, create_host

KINDS = ("reward", "algorithm", "backend", "environment")
_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


class ScaffoldError(PluginError, ValueError):
    """The plugin package cannot be written (bad name, existing directory, taken name)."""


def normalize_name(name: str) -> str:
    """The plugin name for ``name``: lowercase, runs of ``-``, ``_`` and ``.`` as one ``_``."""
    return re.sub(r"[-_.]+", "_", str(name).strip()).lower()


def dist_name(name: str) -> str:
    """The distribution of plugin ``name``: ``acme_reward`` -> ``rlvr-acme-reward``."""
    return "rlvr-" + name.replace("_", "-")


def check_name(name: str, kind: str, *, taken: bool = True) -> None:
    """Raise :class:`ScaffoldError` unless ``name`` (normalised, :func:`normalize_name`) can
    name a new ``kind`` plugin.

    A name is lowercase letters, digits and ``_``, starting with a letter: it is the name in
    configs and the suffix of the package ``rlvr_<name>``. With ``taken``, a name an installed
    plugin of that kind already registers is refused (two plugins with one name cancel out).
    """
    if kind not in KINDS:
        raise ScaffoldError(f"unknown plugin kind {kind!r}; use one of {', '.join(KINDS)}")
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > 50:
        suggestion = re.sub(r"[^a-z0-9_]+", "_", str(name).lower()).strip("_")
        if suggestion and not suggestion[0].isalpha():
            suggestion = f"my_{suggestion}"
        hint = f" (e.g. {suggestion!r})" if suggestion and _NAME.match(suggestion) else ""
        raise ScaffoldError(
            f"invalid plugin name {name!r}: use lowercase letters, digits and '_', starting "
            f"with a letter, at most 50 characters{hint}; it becomes `name: <name>` in configs "
            "and the Python package rlvr_<name>"
        )
    if keyword.iskeyword(name):
        raise ScaffoldError(f"invalid plugin name {name!r}: it is a Python keyword")
    if taken:
        host = create_host()
        record = host.records[kind].get(name)
        if record is not None or name in host.conflicts[kind]:
            owner = record.dist if record is not None else "several plugins"
            raise ScaffoldError(
                f"a {kind} named {name!r} is already registered by {owner or 'a plugin'}; two "
                "plugins registering one name cancel each other out, so pick another name"
            )


def new_plugin(name: str, *, kind: str, directory: str | Path = ".") -> Path:
    """Write the package ``<directory>/rlvr-<name>/`` for a ``kind`` plugin called ``name``
    (normalised: ``acme-reward`` writes ``rlvr-acme-reward/`` for the plugin ``acme_reward``).

    Refuses an invalid or already registered name, and an existing target directory (nothing
    is overwritten). The files are written to a temporary directory first, so a failure leaves
    nothing half-written. Returns the package directory.
    """
    name = normalize_name(name)
    check_name(name, kind)
    parent = Path(directory).expanduser()
    target = parent / dist_name(name)
    if target.exists():
        raise ScaffoldError(f"{target} already exists; remove it or choose another --dir")
    parent.mkdir(parents=True, exist_ok=True)
    files = render(name, kind)
    staging = Path(tempfile.mkdtemp(prefix=f".rlvr-{name}-", dir=parent))
    try:
        for relative, text in files.items():
            path = staging / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def class_name(name: str) -> str:
    """``my_reward`` -> ``MyReward``."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def render(name: str, kind: str) -> dict[str, str]:
    """The package's files (relative path -> text) for the plugin ``name``, without writing."""
    if kind not in KINDS:
        raise ScaffoldError(f"unknown plugin kind {kind!r}; use one of {', '.join(KINDS)}")
    name = normalize_name(name)
    root = resources.files("rlvr.cli") / "templates" / "plugin"
    subs = {  # __USE__ first: the text it brings has placeholders of its own
        "__USE__": (root / kind / "use.md").read_text(encoding="utf-8"),
        "__NAME__": name,
        "__CLS__": class_name(name),
        "__MODULE__": f"rlvr_{name}",
        "__DIST__": dist_name(name),
        "__KIND__": kind,
    }
    out = {}
    for folder in ("common", kind):
        for relative, text in _files(root / folder):
            if relative == "use.md":
                continue
            for key, value in subs.items():
                relative = relative.replace(key, value)
                text = text.replace(key, value)
            out[relative] = text
    return out


def _files(folder: Traversable, prefix: str = "") -> list[tuple[str, str]]:
    """``(relative path, text)`` of every template file below ``folder``."""
    found: list[tuple[str, str]] = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name == "__pycache__" or entry.name.startswith("."):  # caches
            continue
        if entry.is_dir():
            found += _files(entry, f"{prefix}{entry.name}/")
        else:
            found.append((prefix + entry.name, entry.read_text(encoding="utf-8")))
    return found


__all__ = [
    "KINDS",
    "ScaffoldError",
    "check_name",
    "class_name",
    "dist_name",
    "new_plugin",
    "normalize_name",
    "render",
]
