"""The collapse guard (rlvr.training.collapse) and training.keep_best.

The guard's rules on metric sequences shaped like real runs (a collapse, a run that sharpens onto
right answers, one that never learns), then the quickstart's real model trained with a learning
rate 50x too high: its format reward falls from about 1 to 0 within a few steps, and the guard
warns (or, with ``action: stop``, stops the run and ``rlvr train`` exits 1), while the
quickstart's own run stays silent (tests/test_quickstart.py). ``keep_best`` keeps the checkpoint
of the best in-training eval beside the latest, out of ``save_total_limit``'s pruning, and ``rlvr
eval --checkpoint RUN`` evaluates it and says so.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlvr.config.schema import CollapseConfig
from rlvr.training.collapse import CollapseGuard

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "quickstart.yaml"


def _guard(**settings) -> CollapseGuard:
    return CollapseGuard(CollapseConfig(**settings))


def _feed(guard: CollapseGuard, rewards, entropy=None, no_spread=None):
    """Each step's metrics in turn; the first collapse reported (or None)."""
    for i, r in enumerate(rewards):
        m = {
            "reward": r,
            "entropy": entropy[i] if entropy is not None else 0.5,
            "zero_std_frac": no_spread[i] if no_spread is not None else 0.25,
        }
        found = guard.observe_step(i + 1, m)
        if found is not None:
            return found
    return None


# --------------------------------------------------------------------------- the rules


def test_a_reward_that_falls_to_zero_trips_the_guard():
    # The float32 addition run that collapsed (#44): 0.03-0.52 at first, then 0 from step 13.
    rewards = [0.094, 0.062, 0.117, 0.031, 0.344, 0.516, 0.0, 0.25, 0.0] + [0.0] * 20
    found = _feed(_guard(), rewards)
    assert found is not None and found.signal == "reward" and found.step == 13
    assert "fell from 0.130" in found.message and "to 0.000" in found.message


def test_a_run_that_learns_and_sharpens_stays_silent():
    # The reward rises, groups become all-correct (no spread) and the entropy falls 20x:
    # sharpening onto right answers, not a collapse.
    n = 60
    rewards = [0.1 + 0.8 * i / n for i in range(n)]
    entropy = [1.0 / (1 + i) for i in range(n)]
    no_spread = [0.3 + 0.7 * i / n for i in range(n)]
    assert _feed(_guard(), rewards, entropy, no_spread) is None


def test_noise_around_a_flat_reward_stays_silent():
    rewards = [0.2, 0.3, 0.1, 0.25, 0.15] * 12
    assert _feed(_guard(), rewards) is None


def test_groups_without_spread_while_the_reward_falls_trip_it():
    rewards = [0.4] * 5 + [0.3] * 5
    no_spread = [0.3] * 5 + [1.0] * 5
    found = _feed(_guard(), rewards, no_spread=no_spread)
    assert found is not None and found.signal == "no_spread" and found.step == 10


def test_entropy_collapse_without_gain_trips_it():
    rewards = [0.3] * 10
    entropy = [0.5] * 5 + [0.01] * 5
    found = _feed(_guard(), rewards, entropy=entropy)
    assert found is not None and found.signal == "entropy"


def test_held_out_accuracy_falling_trips_it():
    guard = _guard()
    assert guard.observe_eval(0, 0.20) is None
    assert guard.observe_eval(25, 0.15) is None  # down, but not far
    found = guard.observe_eval(50, 0.05)
    assert found is not None and found.signal == "eval" and "0.200" in found.message


def test_it_reports_once_and_off_reports_nothing():
    guard = _guard()
    assert _feed(guard, [0.5] * 5 + [0.0] * 5) is not None
    assert guard.observe_step(11, {"reward": 0.0}) is None  # already reported
    assert _feed(_guard(action="off"), [0.5] * 5 + [0.0] * 5) is None


def test_its_state_round_trips_so_a_resumed_run_judges_the_same_history():
    guard = _guard()
    _feed(guard, [0.5] * 7)
    guard.observe_eval(0, 0.3)
    again = _guard()
    again.load_state_dict(json.loads(json.dumps(guard.state_dict())))
    for step in range(8, 14):  # the same verdict, at the same step, from either
        a = guard.observe_step(step, {"reward": 0.0})
        b = again.observe_step(step, {"reward": 0.0})
        assert a == b
    assert guard.tripped is not None and guard.tripped == again.tripped


def test_nan_steps_are_ignored():
    rewards = [0.5] * 5 + [math.nan] * 3
    assert _feed(_guard(), rewards) is None


# --------------------------------------------------------------------------- real runs


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", OMP_NUM_THREADS="1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> SimpleNamespace:
    root = tmp_path_factory.mktemp("quickstart")
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "quickstart" / "make_model.py"),
            "--model-dir",
            str(root / "model"),
            "--data-dir",
            str(root / "data"),
        ],
        cwd=ROOT,
        env=_env(),
        check=True,
        capture_output=True,
        timeout=300,
    )
    return SimpleNamespace(model=root / "model", data=root / "data")


def _rlvr(*args: str, sets: list[str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "rlvr.cli.main", *args]
    for item in sets:
        command += ["--set", item]
    return subprocess.run(
        command, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600
    )


def _sets(qs: SimpleNamespace, out: Path, *more: str) -> list[str]:
    return [
        f"model.name_or_path={qs.model}",
        f"data.path={qs.data / 'train.jsonl'}",
        f"data.eval_path={qs.data / 'test.jsonl'}",
        f"training.output_dir={out}",
        "training.learning_rate=0.05",  # 50x the quickstart's: the format is lost in a few steps
        "training.warmup_steps=0",
        "training.max_steps=30",
        "training.save_steps=1000",
        *more,
    ]


def test_a_learning_rate_far_too_high_is_reported_in_the_summary(quickstart, tmp_path):
    out = tmp_path / "run"
    proc = _rlvr("train", str(CONFIG), sets=_sets(quickstart, out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "collapse guard: the policy may be collapsing at step" in proc.stdout + proc.stderr
    summary = (out / "run_summary.txt").read_text().splitlines()
    assert summary[0].startswith("WARNING: the policy may have collapsed at step"), summary
    assert json.loads((out / "run_summary.json").read_text())["collapse"]["signal"] == "reward"
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 30  # warn only: the run went on


def test_action_stop_ends_the_run_with_an_error_and_a_checkpoint(quickstart, tmp_path):
    out = tmp_path / "run"
    proc = _rlvr("train", str(CONFIG), sets=_sets(quickstart, out, "training.collapse.action=stop"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the collapse guard stopped the run at step" in errors[0]
    step = json.loads((out / "run_summary.json").read_text())["collapse"]["step"]
    assert step < 30
    assert (out / f"checkpoint-{step}" / "COMPLETE").is_file()  # nothing is lost
    assert (out / "run_summary.txt").read_text().startswith("WARNING: the policy may have")


def test_keep_best_keeps_the_best_eval_and_eval_uses_it(quickstart, tmp_path):
    out = tmp_path / "run"
    proc = _rlvr(
        "train",
        str(CONFIG),
        sets=_sets(
            quickstart,
            out,
            "training.eval_steps=5",
            "training.keep_best=true",
            "training.save_total_limit=1",
            "training.save_steps=5",
        ),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evals = {m["step"]: m["eval/pass@1"] for m in metrics if "eval/pass@1" in m}
    trained = {s: v for s, v in evals.items() if s > 0}
    best_step = max(trained, key=lambda s: (trained[s], -s))  # the first of the best
    record = json.loads((out / "best_checkpoint.json").read_text())
    assert record["step"] == best_step and record["value"] == pytest.approx(trained[best_step])
    kept = sorted(p.name for p in out.glob("checkpoint-*"))
    assert kept == sorted({f"checkpoint-{best_step}", "checkpoint-30"}), kept  # limit 1 + best
    assert "best:" in (out / "run_summary.txt").read_text()

    proc = _rlvr(
        "eval",
        str(CONFIG),
        "--checkpoint",
        str(out),
        "--greedy",
        "--limit",
        "4",
        "--output",
        str(tmp_path / "eval"),
        sets=[
            f"model.name_or_path={quickstart.model}",
            f"data.eval_path={quickstart.data / 'test.jsonl'}",
        ],
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stderr.splitlines() if line.startswith("rlvr: evaluating")]
    assert said and f"checkpoint-{best_step}: the best in-training eval" in said[0], proc.stderr
    if best_step != 30:
        assert "the latest is checkpoint-30" in said[0]


def test_keep_best_needs_eval_steps():
    from pydantic import ValidationError

    from rlvr.config.schema import TrainingConfig

    with pytest.raises(ValidationError, match="keep_best .* needs eval_steps"):
        TrainingConfig(keep_best=True)
