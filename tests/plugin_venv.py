"""Helpers of the slow packaging tests: a fresh venv that sees this interpreter's packages,
and plugin packages built into wheels (or installed editable) into it, as a user would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "plugins"


def run(*cmd: str | Path, cwd: Path | None = None, timeout: float = 600) -> str:
    """Run a command; its stdout, or an assertion error showing both outputs."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def make_venv(root: Path) -> Path:
    """A fresh venv under ``root`` that sees this interpreter's packages (rlvr, torch, pytest)
    through a .pth file, so only the plugin packages are installed into it. Its python."""
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
    """Build ``package`` into a wheel (pip, build isolation) and install it into the venv.

    It is built from a copy, so no ``build/`` or ``*.egg-info`` lands in the source tree and
    no stale build output from an earlier run can end up in the wheel."""
    source = tmp_path / "sources" / package.name
    ignore = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__")
    shutil.copytree(package, source, ignore=ignore)
    wheels = tmp_path / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", wheels, source)
    (wheel,) = wheels.glob(f"{package.name.replace('-', '_')}-*.whl")
    run(python, "-m", "pip", "install", "--no-deps", wheel)


def install_editable(python: Path, package: Path) -> None:
    """``pip install -e package`` into the venv (what `rlvr new plugin` tells users to do)."""
    run(python, "-m", "pip", "install", "--no-deps", "-e", package)


def rlvr(python: Path, *args: str | Path, cwd: Path | None = None) -> str:
    """Run the ``rlvr`` command line with the venv's python."""
    return run(python, "-m", "rlvr.cli.main", *args, cwd=cwd)
