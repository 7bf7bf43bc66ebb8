"""Synchronous against asynchronous rollouts (``training.max_staleness``), side by side in one run.

    python bench/async_rollouts.py                  # the quickstart, 40 steps after 5 warm-up
    python bench/async_rollouts.py --steps 80 --staleness 0 1 2
    python bench/async_rollouts.py --server       # a vLLM server on core 1, the trainer on 0

Trains the quickstart (examples/quickstart.yaml, its tiny model built into a temp dir) once per
``max_staleness`` value, one after the other with the same seed, and prints each run's mean
step time, its generation and training phases, steps per hour, the ratio to the synchronous
run, and the mean reward of its last 10 steps. ``--server``: the ``vllm`` backend in server
mode, its server pinned to the last core and the trainer (``taskset``) to the others. An
asynchronous step can cost as little as max(generation, training) instead of their sum; the
table prints both for the synchronous run. Asynchronous runs turn on the loss's sampler
correction, which they need (``importance_sampling_correction``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def make_task(tmp: Path) -> tuple[Path, Path]:
    """The quickstart's tiny model and its data, built into ``tmp``."""
    model, data = tmp / "tiny-arith", tmp / "data"
    make = ROOT / "examples" / "quickstart" / "make_model.py"
    subprocess.run(
        [sys.executable, str(make), "--model-dir", str(model), "--data-dir", str(data)],
        check=True,
        capture_output=True,
    )
    return model, data


def train_quickstart(
    k: int, task: tuple[Path, Path], out: Path, sets: dict, prefix: list[str] | None = None
) -> list[dict]:
    """``rlvr train`` on the quickstart at ``max_staleness`` ``k`` (with the correction it
    needs), more ``--set`` values in ``sets``; its metrics lines."""
    model, data = task
    sets = {
        "model.name_or_path": model,
        "data.path": data / "train.jsonl",
        "data.eval_path": "null",
        "training.output_dir": out,
        "training.max_staleness": k,
        **sets,
    }
    if k:
        sets["algorithm.params.importance_sampling_correction"] = "true"
    args = [a for key, value in sets.items() for a in ("--set", f"{key}={value}")]
    cmd = [sys.executable, "-m", "rlvr.cli.main", "train", "examples/quickstart.yaml", *args]
    proc = subprocess.run(
        [*(prefix or []), *cmd], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.exit(f"error: max_staleness={k} in {out} failed:\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def train(k: int, steps: int, task: tuple[Path, Path], out: Path, server: bool) -> list[dict]:
    sets: dict = {
        "training.max_steps": steps,
        "training.save_steps": steps,
        "training.logging_steps": steps,
    }
    cores = os.cpu_count() or 1
    prefix = []
    if server:
        sets |= {"backend.name": "vllm", "backend.params.mode": "server"}
        sets["backend.params.server_cpus"] = f"['{cores - 1}']"
        if cores > 1:
            prefix = ["taskset", "-c", f"0-{cores - 2}"]
    return train_quickstart(k, task, out, sets, prefix)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="measured steps per run")
    ap.add_argument("--warmup", type=int, default=5, help="first steps left out")
    ap.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--server", action="store_true", help="vllm in server mode, pinned")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        task = make_task(Path(tmp))
        rows = {}
        for k in args.staleness:
            out = Path(tmp) / f"k{k}"
            lines = train(k, args.warmup + args.steps, task, out, args.server)
            rows[k] = lines[args.warmup :]
    where = "vllm server on the last core, trainer on the others" if args.server else "hf"
    print(f"quickstart, {args.steps} steps after {args.warmup} warm-up, {where}; cpu: {cpu_name()}")
    print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, {os.cpu_count()} cores")
    head = "max_staleness  step s  generation s  training s  steps/hour  vs sync  reward(last 10)"
    print(head)
    base = None
    for k, lines in rows.items():
        step = statistics.mean(m["step_time"] for m in lines)
        gen = statistics.mean(m["generation_time"] + m["scoring_time"] for m in lines)
        trn = statistics.mean(m["training_time"] for m in lines)
        base = base or step
        reward = statistics.mean(m["reward"] for m in lines[-10:])
        print(
            f"{k:>13}  {step:6.3f}  {gen:12.3f}  {trn:10.3f}  {3600 / step:10.0f}  "
            f"{base / step:6.2f}x  {reward:15.3f}"
        )
        if k == 0:
            print(f"{'':>13}  sum {gen + trn:.3f} s, max {max(gen, trn):.3f} s (the async floor)")


def cpu_name() -> str:
    """The CPU, and whether it has native bfloat16: every CPU timing names it."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            flags = Path("/proc/cpuinfo").read_text()
            kind = "AVX512-BF16" if "avx512_bf16" in flags else "AVX2 only"
            return f"{line.split(':', 1)[1].strip()} ({kind})"
    return "unknown"


if __name__ == "__main__":
    main()
