"""#35 item 6: SIGTERM to the process group while rewards are scored (what systemd and Slurm
send) killed the reward workers; their calls got the fallback 0.0, the step trained on those
and was checkpointed, so a resume was no longer exact. Now the workers ignore SIGTERM as they
ignore SIGINT (the trainer stops them), and a step whose rewards still failed once a stop was
asked for (a reward's own subprocess got the signal too) is discarded, not trained on."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from rlvr.cli.main import main
from rlvr.outputs.checkpoint import list_checkpoints
from rlvr.outputs.metrics import TIMING_KEYS, read_metrics


def _comparable(lines: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if k not in TIMING_KEYS} for m in lines]


def _terminate_while_scoring_step_2(config: Path, sleep: float) -> tuple[str, int]:
    """Run ``rlvr train config`` in its own process group; once the reward call of step 2
    runs, SIGTERM the whole group. Returns (stderr + stdout, exit code)."""
    marker = config.parent / "scoring"
    env = {
        **os.environ,
        "RLVR_TEST_SCORING_MARKER": str(marker),
        "RLVR_TEST_SCORING_SLEEP": str(sleep),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr", "train", "--allow-code", str(config)],
        cwd=config.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as a service's
    )
    deadline = time.monotonic() + 300
    try:
        step_2 = marker.with_name(marker.name + ".2")  # written by step 2's reward call
        while not step_2.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "no step 2"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGTERM)  # the trainer, the forkserver, the workers
        text, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return text.decode(errors="replace"), proc.returncode


def test_sigterm_while_scoring_finishes_the_step_on_real_rewards(write_run, tmp_path):
    rewards = [{"name": "callable", "label": "slow", "params": {"function": "rewards.py:slow"}}]
    common = {"reward_workers": 2, "lr_scheduler_type": "constant"}
    config = write_run(rewards=rewards, training={"max_steps": 4, **common})
    text, code = _terminate_while_scoring_step_2(config, sleep=0.4)
    assert code == 0, text
    assert "stopped at step 2; continue with --resume" in text
    out = config.parent / "out"
    got = read_metrics(out)
    assert [m["rewards/slow/errors"] for m in got] == [0, 0], text
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-2"]
    # What was trained and saved is what an uninterrupted run trains and logs.
    whole = write_run(
        rewards=rewards,
        training={"max_steps": 2, "output_dir": str(tmp_path / "whole"), **common},
        name="whole.yaml",
    )
    assert main(["train", "--allow-code", str(whole)]) == 0
    assert _comparable(got) == _comparable(read_metrics(tmp_path / "whole"))


def test_a_step_whose_rewards_failed_after_a_stop_request_is_discarded(write_run):
    # The reward runs `sleep` per call: SIGTERM to the group ends those too, so calls fail
    # whatever the workers do. Those failures are the shutdown's: step 2 is not trained on.
    # (one call on the step's 8 completions fails all 8: max_reward_error_frac 1 lets the
    # stop's own check, not the error share, discard the step)
    rewards = [{"name": "callable", "label": "shell", "params": {"function": "rewards.py:shell"}}]
    training = {"max_steps": 4, "reward_workers": 2, "max_reward_error_frac": 1.0}
    config = write_run(rewards=rewards, training=training)
    # the SIGTERM lands while step 2's one batched call runs its 2 s `sleep`
    text, code = _terminate_while_scoring_step_2(config, sleep=2.0)
    assert code == 0, text
    assert "stopped at step 1 (checkpoint in " in text
    assert re.search(r"step 2 discarded: \d+ reward calls failed after the stop", text), text
    assert "stopped;" not in text  # one line says it
    out = config.parent / "out"
    assert [m["step"] for m in read_metrics(out)] == [1]
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-1"]
