"""The packaging proof: example plugin packages built into wheels, installed into a fresh venv,
and used by name from a config, exactly as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "plugins"

pytestmark = pytest.mark.slow


def run(*cmd: str | Path, cwd: Path | None = None) -> str:
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv that sees this interpreter's packages (rlvr, torch) through a .pth file,
    so only the plugin wheels are installed into it."""
    root = tmp_path_factory.mktemp("venv")
    run(sys.executable, "-m", "venv", root / "v")
    python = root / "v" / "bin" / "python"
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    parents = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    # addsitedir (not a bare path) so the parent's own .pth files run: editable installs
    # of rlvr are found through one.
    lines = [f"import site; site.addsitedir({p!r})" for p in sorted(parents)]
    Path(site, "_rlvr_parent.pth").write_text("\n".join(lines) + "\n")
    return python


def build_and_install(python: Path, package: Path, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", wheels, package)
    (wheel,) = wheels.glob(f"{package.name.replace('-', '_')}-*.whl")
    run(python, "-m", "pip", "install", "--no-deps", wheel)


def test_keywords_reward_package(venv, tmp_path):
    build_and_install(venv, EXAMPLES / "rlvr-keywords", tmp_path)
    listing = json.loads(run(venv, "-m", "rlvr.cli", "plugins", "--json"))
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
    run(venv, "-m", "rlvr.cli", "rewards", "score", "-c", config, "-i", rows, "-o", out)
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert scored[0]["rewards"] == {"keywords": 1.0, "numbers": 1.0}
    assert scored[0]["reward"] == 1.5
    assert scored[1]["rewards"] == {"keywords": -0.5, "numbers": 0.0}
