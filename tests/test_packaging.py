"""The packaging proof: example plugin packages built into wheels, installed into a fresh venv,
and used by name from a config, exactly as a user would."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# tests/ on sys.path whatever pytest's import mode, for the shared helper module.
sys.path.insert(0, str(Path(__file__).parent))

from plugin_venv import EXAMPLES, build_and_install, make_venv, run  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv that sees this interpreter's packages (rlvr, torch) through a .pth file,
    so only the plugin wheels are installed into it."""
    return make_venv(tmp_path_factory.mktemp("venv"))


def test_keywords_reward_package(venv, tmp_path):
    build_and_install(venv, EXAMPLES / "rlvr-keywords", tmp_path)
    listing = json.loads(run(venv, "-m", "rlvr.cli.main", "plugins", "--json"))
    (plugin,) = [p for p in listing["plugins"] if p["dist"] == "rlvr-keywords"]
    assert plugin["version"] == "1.0.0"
    assert plugin["registers"][0]["name"] == "keywords"
    assert listing["failures"] == []

    config = tmp_path / "config.yaml"
    config.write_text(
        "rewards:\n"
        "  - name: keywords\n"
        "    params: {required: [total, answer], banned: [sorry]}\n"
        "  - name: numbers\n"
        "    weight: 0.5\n"
    )
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        json.dumps({"completion": "The total answer is 72", "answer": "#### 72"})
        + "\n"
        + json.dumps({"completion": "sorry, the total is 5", "answer": "#### 72"})
        + "\n"
    )
    out = tmp_path / "scored.jsonl"
    run(venv, "-m", "rlvr.cli.main", "rewards", "score", "-c", config, "-i", rows, "-o", out)
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert scored[0]["rewards"] == {"keywords": 1.0, "numbers": 1.0}
    assert scored[0]["reward"] == 1.5
    assert scored[1]["rewards"] == {"keywords": -0.5, "numbers": 0.0}


def test_rlvr_wheel_layout(tmp_path):
    """A plain (non-editable) build: `core/` ships as `rlvr`, `plugins/` as `rlvr.plugins`,
    and nothing lands at the top level of site-packages but `rlvr`."""
    import zipfile

    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", tmp_path, EXAMPLES.parents[1])
    (wheel,) = tmp_path.glob("rlvr-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"rlvr", "rlvr-0.1.0.dist-info"}
    for module in ("cli/main", "functional/__init__", "api/host", "plugins/rewards/__init__"):
        assert f"rlvr/{module}.py" in names
    # Every subpackage of core/ ships (a missing `packages` entry would drop one silently).
    core = EXAMPLES.parents[1] / "core"
    for init in core.glob("*/__init__.py"):
        assert f"rlvr/{init.parent.name}/__init__.py" in names, init.parent.name
    # `rlvr new plugin`'s templates are package data (and nothing else of core/cli/templates/).
    templates = {n for n in names if n.startswith("rlvr/cli/templates/")}
    assert "rlvr/cli/templates/plugin/reward/__MODULE__/__init__.py" in templates
    assert "rlvr/cli/templates/plugin/common/pyproject.toml" in templates
    assert not any("ruff" in n or "__pycache__" in n for n in templates)
    entry_points = zipfile.ZipFile(wheel).read("rlvr-0.1.0.dist-info/entry_points.txt").decode()
    assert "rewards = rlvr.plugins.rewards" in entry_points
    assert "rlvr.testing = rlvr.testing" in entry_points
