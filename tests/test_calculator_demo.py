"""The calculator demo learns: examples/calculator/make_model.py, then a shortened ``rlvr train
examples/calculator/calculator.yaml``, and both the share of episodes that call the calculator
and the ``answer`` reward rise clearly.

The warm-started model calls the tool on about a quarter of its episodes and otherwise guesses
a product it cannot compute (right about 1 time in 8000), so the rise is RL's: GRPO credits
the tool-using episodes, which are right when the model copies the result. The margins come
from the runs in docs/how-to/teach-a-tool.md (3 seeds): over 30 steps the tool-call rate rose
by 0.61 to 0.63 and the reward by 0.23 to 0.35 (last 10 steps' mean minus the first 10's),
while a run that does not learn (learning rate 1e-12) moved them by 0.03 and 0.01. A 10-step
mean of the reward varies by about 0.04 (0.02 for the tool-call rate), so 0.30 and 0.10 sit
well clear of both. The model and data are built in a temporary directory; the checkout's
examples/models is left alone. About 5 to 12 minutes on 2 CPU cores (the warm-up is most of
it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "calculator"

STEPS = 30
#: least rise of the 10-step means (last 10 minus first 10) that a learning run shows.
REWARD_RISE, TOOL_RATE_RISE = 0.10, 0.30


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


@pytest.mark.slow
def test_the_calculator_demo_learns_to_call_the_tool(tmp_path):
    model_dir, data_dir, out = tmp_path / "model", tmp_path / "data", tmp_path / "run"
    subprocess.run(
        [
            sys.executable,
            str(DEMO / "make_model.py"),
            "--model-dir",
            str(model_dir),
            "--data-dir",
            str(data_dir),
        ],
        cwd=ROOT,
        env=_env(),
        check=True,
        timeout=1200,
    )
    train = {r["answer"] for r in _jsonl(data_dir / "train.jsonl")}
    test = {r["answer"] for r in _jsonl(data_dir / "test.jsonl")}
    assert train and test and not train & test  # no held-out product is a training answer

    overrides = {
        "model.name_or_path": model_dir,
        "data.path": data_dir / "train.jsonl",
        "data.eval_path": data_dir / "test.jsonl",
        "training.output_dir": out,
        "training.max_steps": STEPS,
        "training.save_steps": STEPS,
    }
    sets = [arg for k, v in overrides.items() for arg in ("--set", f"{k}={v}")]
    subprocess.run(
        [sys.executable, "-m", "rlvr.cli.main", "train", str(DEMO / "calculator.yaml"), *sets],
        cwd=ROOT,
        env=_env(),
        check=True,
        timeout=1800,
    )
    rows = _jsonl(out / "metrics.jsonl")
    assert len(rows) == STEPS

    def rise(key: str) -> float:
        values = [r[key] for r in rows]
        return sum(values[-10:]) / 10 - sum(values[:10]) / 10

    assert rise("env/tool_call_rate") > TOOL_RATE_RISE, [r["env/tool_call_rate"] for r in rows]
    assert rise("reward") > REWARD_RISE, [r["reward"] for r in rows]
    assert all(r["env/failed"] == 0 for r in rows)
