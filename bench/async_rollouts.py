"""Synchronous against asynchronous rollouts (``training.max_staleness``), side by side in one run.

    python bench/async_rollouts.py                  # the quickstart, 40 steps after 5 warm-up
    python bench/async_rollouts.py --steps 80 --staleness 0 1 2
    python bench/async_rollouts.py --server       # a vLLM server on core 1, the trainer on 0
    python bench/async_rollouts.py --recipe --steps 8 --warmup 2 --staleness 0 1 2

Trains the quickstart (examples/quickstart.yaml, its tiny model built into a temp dir) once per
``max_staleness`` value, one after the other with the same seed, and prints each run's mean
step time, its generation and training phases, steps per hour, the ratio to the synchronous
run, and the mean reward of its last 10 steps. ``--server``: the ``vllm`` backend in server
mode, its server pinned to the last core and the trainer (``taskset``) to the others. An
asynchronous step can cost as little as max(generation, training) instead of their sum; the
table prints both for the synchronous run. Asynchronous runs turn on the loss's sampler
correction, which they need (``importance_sampling_correction``).

``--recipe``: the SmolLM2 addition recipe (examples/reasoning_gym_smollm2.yaml, needs the GGUF
and rlvr[reasoning-gym]) instead, without its in-training eval: first colocated (vLLM in the
trainer's process, synchronous, all cores), then from a server as ``--server`` does, once per
``max_staleness``.
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


def quickstart_sets(task: tuple[Path, Path]) -> dict:
    """The ``--set`` values that point the quickstart at the model and data of ``task``."""
    model, data = task
    return {
        "model.name_or_path": model,
        "data.path": data / "train.jsonl",
        "data.eval_path": "null",
    }


def run(config: str, k: int, out: Path, sets: dict, prefix: list[str] | None = None) -> list[dict]:
    """``rlvr train config`` at ``max_staleness`` ``k`` (with the correction it needs), more
    ``--set`` values in ``sets``; its metrics lines."""
    sets = {"training.output_dir": out, "training.max_staleness": k, **sets}
    if k:
        sets["algorithm.params.importance_sampling_correction"] = "true"
    args = [a for key, value in sets.items() for a in ("--set", f"{key}={value}")]
    cmd = [sys.executable, "-m", "rlvr.cli.main", "train", config, *args]
    proc = subprocess.run(
        [*(prefix or []), *cmd], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.exit(f"error: max_staleness={k} in {out} failed:\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def train(k: int, steps: int, task: tuple[Path, Path] | None, out: Path, mode: str) -> list[dict]:
    """One run: the quickstart (``task``: its model and data) or the recipe (``None``), in
    ``mode`` ``hf``, ``colocated`` (vllm in the trainer's process) or ``server`` (pinned)."""
    sets: dict = {
        "training.max_steps": steps,
        "training.save_steps": steps,
        "training.logging_steps": steps,
    }
    if task is None:
        config = "examples/reasoning_gym_smollm2.yaml"
        sets |= {"training.eval_steps": "null", "training.max_minutes": "null"}
    else:
        config = "examples/quickstart.yaml"
        sets |= quickstart_sets(task)
    cores = os.cpu_count() or 1
    prefix = []
    if mode != "hf":
        sets["backend.name"] = "vllm"
    if mode == "server":
        sets["backend.params.mode"] = "server"
        sets["backend.params.server_cpus"] = f"['{cores - 1}']"
        if cores > 1:
            prefix = ["taskset", "-c", f"0-{cores - 2}"]
    return run(config, k, out, sets, prefix)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40, help="measured steps per run")
    ap.add_argument("--warmup", type=int, default=5, help="first steps left out")
    ap.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--server", action="store_true", help="vllm in server mode, pinned")
    ap.add_argument("--recipe", action="store_true", help="the SmolLM2 recipe: colocated, server")
    args = ap.parse_args()
    steps = args.warmup + args.steps
    with tempfile.TemporaryDirectory() as tmp:
        task = None if args.recipe else make_task(Path(tmp))
        rows = {}
        if args.recipe:  # the synchronous colocated baseline first
            rows["colocated 0"] = train(0, steps, None, Path(tmp) / "colocated", "colocated")
        mode = "server" if args.server or args.recipe else "hf"
        for k in args.staleness:
            rows[f"{mode} {k}"] = train(k, steps, task, Path(tmp) / f"k{k}", mode)
    rows = {name: lines[args.warmup :] for name, lines in rows.items()}
    what = "the SmolLM2 recipe" if args.recipe else "quickstart"
    where = (
        "a vllm server on the last core, the trainer on the others" if mode == "server" else mode
    )
    print(f"{what}, {args.steps} steps after {args.warmup} warm-up; {where}; cpu: {cpu_name()}")
    print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, {os.cpu_count()} cores")
    print(
        f"{'mode, staleness':>18}  step s  generation s  training s  steps/hour  vs first  reward"
    )
    base = None
    for name, lines in rows.items():
        step = statistics.mean(m["step_time"] for m in lines)
        gen = statistics.mean(m["generation_time"] + m["scoring_time"] for m in lines)
        trn = statistics.mean(m["training_time"] for m in lines)
        base = base or step
        reward = statistics.mean(m["reward"] for m in lines[-10:])
        print(
            f"{name:>18}  {step:6.3f}  {gen:12.3f}  {trn:10.3f}  {3600 / step:10.0f}  "
            f"{base / step:7.2f}x  {reward:15.3f}"
        )
        if name.endswith(" 0"):
            print(f"{'':>18}  sum {gen + trn:.3f} s, max {max(gen, trn):.3f} s (the async floor)")


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
