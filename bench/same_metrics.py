"""Check that a change to the rollout leaves training bit-identical: run short training runs
(the quickstart, and a multi-turn run with the ``tools`` environment, both with in-training
eval) into a directory, then compare two such directories' ``metrics.jsonl`` key by key,
timing fields excluded.

    python bench/same_metrics.py run /tmp/before      # on the old code
    python bench/same_metrics.py run /tmp/after       # on the new code
    python bench/same_metrics.py compare /tmp/before /tmp/after

About a minute on 2 CPU cores with ``OMP_NUM_THREADS=1``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("quickstart", "tools")
#: metrics that measure time or memory, not what was computed
TIMING = ("time", "seconds", "per_second", "memory_mb")


def _train(config: dict, out: Path) -> None:
    import rlvr

    config["training"]["output_dir"] = str(out)
    rlvr.train(config, progress=False)


def run(directory: Path) -> None:
    """The runs of this script into ``directory`` (made; its model and data built there)."""
    directory.mkdir(parents=True, exist_ok=True)
    model, data = directory / "tiny-arith", directory / "data"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "quickstart" / "make_model.py"),
            "--model-dir",
            str(model),
            "--data-dir",
            str(data),
        ],
        check=True,
    )
    import yaml

    quick = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    quick["model"]["name_or_path"] = str(model)
    quick["data"].update(path=str(data / "train.jsonl"), eval_path=str(data / "test.jsonl"))
    quick["training"].update(
        max_steps=4, logging_steps=1, eval_steps=2, eval_limit=8, report_to=[], save_steps=100
    )
    _train(quick, directory / "quickstart")
    tools = {
        "model": {"name_or_path": str(model), "dtype": "float32"},
        "data": {"path": str(data / "train.jsonl"), "prompt_field": "question"},
        "rewards": [{"name": "answer"}],
        "environment": {"name": "tools", "max_turns": 2, "tool_call_format": "hermes"},
        "training": {
            "max_steps": 3,
            "num_generations": 2,
            "per_device_train_batch_size": 2,
            "max_completion_length": 8,
            "logging_steps": 1,
            "save_steps": 100,
            "report_to": [],
            "eval_steps": 3,
            "eval_limit": 3,
        },
    }
    _train(tools, directory / "tools")


def _timing(key: str) -> bool:
    return key.endswith(TIMING)


def compare(a: Path, b: Path) -> list[str]:
    """The differences between the runs in ``a`` and ``b`` (empty: identical)."""
    out = []
    for name in RUNS:
        rows = []
        for d in (a, b):
            path = d / name / "metrics.jsonl"
            rows.append([json.loads(line) for line in path.read_text().splitlines() if line])
        if len(rows[0]) != len(rows[1]):
            out.append(f"{name}: {len(rows[0])} lines against {len(rows[1])}")
            continue
        for k, (x, y) in enumerate(zip(*rows, strict=True)):
            for key in sorted(set(x) | set(y)):
                if _timing(key):
                    continue
                if x.get(key, "<absent>") != y.get(key, "<absent>"):
                    out.append(
                        f"{name} line {k} {key}: {x.get(key, '<absent>')!r} -> "
                        f"{y.get(key, '<absent>')!r}"
                    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run").add_argument("directory", type=Path)
    cmp = sub.add_parser("compare")
    cmp.add_argument("a", type=Path)
    cmp.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        run(args.directory)
        return
    diffs = compare(args.a, args.b)
    print("\n".join(diffs) or "identical (timing fields excluded)")
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
