"""Data-parallel overhead on CPU: one process with the whole step's prompts against 2 ranks
(torchrun, gloo) with half each, the same global batch.

    python bench/distributed.py                 # 6 steps, 8 prompts x 8 completions per step
    python bench/distributed.py --steps 10 --prompts 16

A random tiny Qwen2 (hidden 256, 4 layers, as bench/train.py), the ``hf`` backend, ``grpo``
with ``beta=0``, completions of up to ``--length`` tokens, one optimizer update per step. Every
process runs one thread (``OMP_NUM_THREADS=1``), so 2 ranks use 2 cores where the single
process uses 1: the printed efficiency ``t1 / (2 * t2)`` is 1.0 for perfect scaling, and what
it lacks is the cost of data parallelism (collectives, duplicated per-step work, imbalance
between ranks). Times are medians of the steps after the first, from ``metrics.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

KEYS = ("step_time", "generation_time", "scoring_time", "training_time")


def write_inputs(root: Path) -> tuple[Path, Path]:
    from rlvr import build_tiny_model

    model = build_tiny_model(root / "model", hidden_size=256, num_layers=4, head_dim=64)
    data = root / "data.jsonl"
    pairs = [(a, b) for a in range(9) for b in range(9)]
    rows = [{"prompt": f"What is {a} + {b}?", "answer": str(a + b)} for a, b in pairs]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return model, data


def config(model: Path, data: Path, out: Path, prompts: int, args: argparse.Namespace) -> Path:
    import yaml

    raw = {
        "model": {"name_or_path": str(model)},
        "data": {"path": str(data)},
        "rewards": [{"name": "numbers"}, {"name": "format"}],
        "algorithm": {"name": "grpo", "params": {"beta": 0.0}},
        "backend": {"name": "hf"},
        "training": {
            "output_dir": str(out),
            "max_steps": args.steps,
            "per_device_train_batch_size": prompts,
            "num_generations": 8,
            "max_completion_length": args.length,
            "reward_workers": 0,
            "learning_rate": 1e-5,
            "save_steps": 10_000,
        },
    }
    path = out.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(raw))
    return path


def run(cmd: list[str]) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def medians(out: Path) -> dict[str, float]:
    lines = [json.loads(s) for s in (out / "metrics.jsonl").read_text().splitlines()][1:]
    return {k: statistics.median(m[k] for m in lines) for k in KEYS}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--prompts", type=int, default=8, help="prompts per step (global)")
    p.add_argument("--length", type=int, default=32, help="max completion tokens")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model, data = write_inputs(root)
        rlvr = [sys.executable, "-m", "rlvr", "train"]
        one = config(model, data, root / "one", args.prompts, args)
        two = config(model, data, root / "two", args.prompts // 2, args)
        wall1 = run([*rlvr, str(one)])
        wall2 = run([*rlvr, str(two), "--nproc-per-node", "2"])
        m1, m2 = medians(root / "one"), medians(root / "two")
    print(
        f"{args.prompts} prompts x 8 completions x <= {args.length} tokens per step, "
        f"{args.steps} steps; medians of steps 2..{args.steps} (s)"
    )
    print(f"{'':16}{'1 process':>12}{'2 ranks':>12}{'t1/(2 t2)':>12}")
    for key in KEYS:
        eff = m1[key] / (2 * m2[key]) if m2[key] > 0 else float("nan")
        print(f"{key:16}{m1[key]:12.3f}{m2[key]:12.3f}{eff:12.2f}")
    print(f"{'wall (whole run)':16}{wall1:12.1f}{wall2:12.1f}{wall1 / (2 * wall2):12.2f}")


if __name__ == "__main__":
    main()
