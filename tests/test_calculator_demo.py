"""The calculator demo learns: examples/calculator/make_model.py, then a shortened ``rlvr train
examples/calculator/calculator.yaml``, and both the share of episodes that call the calculator
and the ``answer`` reward rise clearly.

The warm-started model calls the tool on about a quarter of its episodes and otherwise guesses
a product it cannot compute (right about 1 time in 8000), so the rise is RL's: GRPO credits
the tool-using episodes, which are right when the model copies the result. The margins are
set from the noise measured over 3 seeds (docs/how-to/teach-a-tool.md): a 10-step mean of
either metric varies by about 0.05 between seeds at a given point of training; the rises
measured over the first 30 steps were far larger than the margins asserted, and a run that
did not learn (the tool-call rate staying at the warm-up's 0.25) fails them. The model and
data are built in a temporary directory; the checkout's examples/models is left alone.
About 3 to 10 minutes on 2 CPU cores (the warm-up is most of it).
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
REWARD_RISE, TOOL_RATE_RISE = 0.25, 0.25


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
    train = {r["question"] for r in _jsonl(data_dir / "train.jsonl")}
    test = {r["question"] for r in _jsonl(data_dir / "test.jsonl")}
    assert train and test and not train & test  # held-out products are never trained on

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
