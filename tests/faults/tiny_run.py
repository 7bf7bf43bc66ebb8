"""Shared by the fault tests of checkpoints, output directories, code execution and the
launcher: a YAML config that trains the tiny test model for a few CPU seconds, and ``rlvr``
run in this process or as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from rlvr.cli.main import main

ROWS = [
    {"prompt": f"What is {a} + {b}?", "answer": str(a + b)}
    for a in range(1, 5)
    for b in range(1, 5)
]


def write_config(
    directory: Path, model_dir: Path, output_dir: Path | str, name: str = "run.yaml", **training
) -> Path:
    """``directory/name``: 2 prompts x 2 completions of 8 tokens a step, a checkpoint every
    ``save_steps`` (default 2) of ``max_steps`` (default 2)."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = directory / "rows.jsonl"
    if not rows.exists():
        rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    config: dict[str, Any] = {
        "model": {"name_or_path": str(model_dir)},
        "data": {"path": str(rows)},
        "rewards": [{"name": "numbers"}, {"name": "format"}],
        "algorithm": {"name": "grpo", "params": {"beta": 0.0}},
        "backend": {"name": "hf"},
        "training": {
            "output_dir": str(output_dir),
            "max_steps": 2,
            "save_steps": 2,
            "per_device_train_batch_size": 2,
            "num_generations": 2,
            "max_completion_length": 8,
            "reward_workers": 0,
            "seed": 0,
            **training,
        },
    }
    path = directory / name
    path.write_text(yaml.safe_dump(config))
    return path


def rlvr(capsys: Any, *args: str) -> tuple[int, str]:
    """``rlvr ARGS`` in this process: (exit code, stderr)."""
    capsys.readouterr()
    code = main([str(a) for a in args])
    return code, capsys.readouterr().err


def rlvr_process(*args: str, **kwargs: Any) -> subprocess.Popen:
    """``python -m rlvr ARGS`` as a subprocess (stdout and stderr piped, text)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **kwargs.pop("env", {})}
    return subprocess.Popen(
        [sys.executable, "-m", "rlvr", *map(str, args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def wait_for(condition: Any, proc: subprocess.Popen, seconds: float = 180) -> None:
    """Until ``condition()``; fails with ``proc``'s stderr should it end first."""
    deadline = time.monotonic() + seconds
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read()[-4000:] if proc.stderr else proc.returncode)
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def error_lines(stderr: str) -> list[str]:
    """The ``error:`` lines of ``stderr``; a traceback fails the caller's test."""
    assert "Traceback" not in stderr, stderr[-4000:]
    return [line for line in stderr.splitlines() if line.startswith("error:")]
