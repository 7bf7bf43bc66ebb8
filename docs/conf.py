"""Sphinx configuration of rlvr's docs: Markdown pages (MyST), the furo theme, autodoc of the
public API, and the local extension ``_ext/rlvr_reference.py`` that writes the reference pages
from the code (config keys, plugin params, the command line).

Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (``pip install -e
".[docs]"``). autodoc imports the installed ``rlvr`` package, as a user's code would.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

import rlvr  # noqa: E402

project = "rlvr"
author = "the rlvr authors"
copyright = "the rlvr authors"  # noqa: A001
release = rlvr.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "rlvr_reference",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "Thumbs.db", ".DS_Store"]

# Markdown: GitHub-style anchors for `[text](page.md#a-heading)` links, `:::` fences.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# autodoc: the public API as `import rlvr` gives it, members in source order, type hints in the
# description (signatures stay readable).
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"exclude-members": "model_config, model_fields, model_computed_fields"}

html_theme = "furo"
html_title = f"rlvr {release}"
html_static_path: list[str] = []
