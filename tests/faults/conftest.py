"""Fault-campaign reproductions (rlvr #35): each test drives a real run (or the real check)
into one fault found by the campaign, on the tiny model, and checks what a user then sees.

``write_run`` writes a run config on the tiny model (16 arithmetic rows, 2 prompts x 4
completions of at most 8 tokens a step, a few seconds a step on a CPU) and its rewards file,
and returns the config path; tests add or change keys with ``--set`` or its arguments.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

#: The rewards the runs use, scored in the reward worker processes through `callable`.
#: Each behaves by the row's answer, so a test picks the bad row by the data order.
REWARDS = textwrap.dedent(
    """
    import os, subprocess, time

    def digits(prompts, completions, **kwargs):
        return [sum(ch.isdigit() for ch in c) / max(len(c), 1) + 0.01 * len(c)
                for c in completions]

    def huge_on_five(prompts, completions, answer, **kwargs):
        # a reward with a bug: a float far past anything a reward means, on answer 5
        return [1e308 if a == "5" else 1.0 for a in answer]

    SLEEP = os.environ.get("RLVR_TEST_SCORING_SLEEP", "0")

    def _scoring(trainer_state=None, **kwargs):
        # tells a test which step's call is running (it then sends a signal): one batched
        # call a step, so the marker names the step (steps done + 1) rather than being
        # deleted and awaited again, which raced the next step's call
        marker = os.environ.get("RLVR_TEST_SCORING_MARKER")
        if marker:
            step = trainer_state.global_step + 1 if trainer_state is not None else 0
            open(f"{marker}.{step}", "a").close()

    def slow(prompts, completions, **kwargs):
        # slow enough that a signal arrives while the step is being scored
        _scoring(**kwargs)
        time.sleep(float(SLEEP))
        return [len(c) / 8 for c in completions]

    def shell(prompts, completions, **kwargs):
        # runs a program per call, as a code-execution reward does
        proc = subprocess.Popen(["sleep", SLEEP])
        _scoring(**kwargs)  # once the program runs
        if proc.wait():
            raise subprocess.CalledProcessError(proc.returncode, proc.args)
        return [len(c) / 8 for c in completions]

    def hang(prompts, completions, **kwargs):
        # an unreachable judge: every call hangs until the pool's timeout kills it
        time.sleep(3600)

    def hang_from_step_2(prompts, completions, **kwargs):
        # a judge that answers step 1, then stops answering (a signal arrives meanwhile)
        _scoring(**kwargs)
        state = kwargs.get("trainer_state")
        if state is not None and state.global_step >= 1:
            time.sleep(3600)
        return [len(c) / 8 for c in completions]
    """
)


@pytest.fixture
def write_run(tmp_path: Path, tiny_model_dir: Path):
    """``write_run(rewards=None, training=None, rows=None) -> config path``."""

    def write(
        rewards: list[dict[str, Any]] | None = None,
        training: dict[str, Any] | None = None,
        rows: list[dict[str, Any]] | None = None,
        name: str = "run.yaml",
    ) -> Path:
        (tmp_path / "rewards.py").write_text(REWARDS)
        data = tmp_path / "rows.jsonl"
        if rows is None:
            rows = [
                {"prompt": f"What is {a} + {b}?", "answer": str(a + b)}
                for a in range(1, 5)
                for b in range(1, 5)
            ]
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        t = {
            "output_dir": str(tmp_path / "out"),
            "max_steps": 2,
            "per_device_train_batch_size": 2,
            "num_generations": 4,
            "max_completion_length": 8,
            "max_prompt_length": 64,
            "learning_rate": 1e-3,
            "reward_workers": 1,
            "seed": 0,
            "save_steps": 100,
        }
        t.update(training or {})
        config = {
            "model": {"name_or_path": str(tiny_model_dir)},
            "data": {"path": "rows.jsonl", "shuffle": False},
            "rewards": rewards
            if rewards is not None
            else [{"name": "callable", "params": {"function": "rewards.py:digits"}}],
            "algorithm": {"name": "grpo", "params": {"beta": 0.0}},
            "backend": {"name": "hf"},
            "training": t,
        }
        path = tmp_path / name
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    return write
