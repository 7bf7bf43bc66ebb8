"""#35 item 13: a reward that hangs (an unreachable judge) cost ``timeout x calls / workers``
of silence per step before the error-share check could stop the run (12.5 minutes with the
defaults). Scoring now stops as soon as a reward's first calls all time out, or its failures
are certain to pass ``training.max_reward_error_frac``.

#45 item 18: a batched reward (``callable``: one call on a step's completions) that hangs had a
deadline of ``timeout`` per completion (1,280 s of silence with 128 completions and the default
10 s), and a SIGTERM then waited for it. One call now has one ``timeout``, and a stop request
abandons a scoring round still running a few seconds later (the step is discarded)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# tests/ on sys.path, here and in the reward workers (they get the parent's sys.path)
sys.path.insert(0, str(Path(__file__).parents[1]))

import bad_rewards  # noqa: E402

from rlvr.api.registration import Sample  # noqa: E402
from rlvr.cli.main import main  # noqa: E402
from rlvr.outputs.checkpoint import list_checkpoints  # noqa: E402
from rlvr.outputs.metrics import read_metrics  # noqa: E402
from rlvr.rewards.pool import STOP_GRACE, PoolSpec, RewardPool, ScoringAbandoned  # noqa: E402


def test_a_reward_that_always_hangs_stops_after_its_first_timeouts():
    # 16 calls of 0.5 s on 2 workers, 4 s of scoring before; the first 4 timeouts (1 s) now tell
    # bad_rewards.misbehave hangs on "sleep" (a light module: replacement workers start fast)
    with RewardPool([PoolSpec("judge", bad_rewards.misbehave, timeout=0.5)], workers=2) as pool:
        pool.wait_ready()
        started = time.monotonic()
        result = pool.score([Sample(completion="sleep")] * 16, max_error_frac=0.5)
    assert "timed out on each of its first 4 calls (0.5 s each)" in str(result.stopped)
    assert "looks stuck" in str(result.stopped) and "the other 12 calls were not made" in str(
        result.stopped
    )
    assert result.timeouts["judge"] == 4 and time.monotonic() - started < 3.5


def test_a_batched_trl_reward_that_hangs_stops_the_run_after_its_one_call(write_run, capsys):
    # A TRL-style function is called once on the step's 16 completions: its deadline is 16 x
    # its timeout (0.25 s), then every completion has failed and the run stops.
    rewards = [
        {"name": "callable", "label": "digits", "params": {"function": "rewards.py:digits"}},
        {
            "name": "callable",
            "label": "judge",
            "timeout": 0.25,
            "params": {"function": "rewards.py:hang"},
        },
    ]
    config = write_run(
        rewards=rewards, training={"per_device_train_batch_size": 4, "reward_workers": 2}
    )
    assert main(["train", "--allow-code", str(config)]) == 1
    printed = capsys.readouterr()
    (line,) = [x for x in printed.err.splitlines() if x.startswith("error: ")]
    assert "reward 'judge' failed on 16 of 16 calls (scoring stopped there)" in line
    assert "0 errors and 16 timeouts in 16 calls" in printed.out + printed.err
    assert list_checkpoints(config.parent / "out") == []


def test_a_batched_reward_that_hangs_costs_one_timeout_whatever_the_batch_size():
    # 64 samples in one call: the deadline was 64 x 1 s; it is the reward's 1 s now
    spec = PoolSpec("judge", bad_rewards.batch_misbehave, timeout=1.0, batch="call")
    with RewardPool([spec], workers=1) as pool:
        pool.wait_ready()
        started = time.monotonic()
        result = pool.score([Sample(completion="sleep")] * 64)
        took = time.monotonic() - started
    assert result.timeouts["judge"] == 64 and result.values["judge"] == [0.0] * 64
    assert "timed out after 1s" in result.failures["judge"][0]
    assert took < 5, took


def test_a_stop_request_abandons_a_round_that_hangs():
    spec = PoolSpec("judge", bad_rewards.batch_misbehave, timeout=600, batch="call")
    with RewardPool([spec], workers=1) as pool:
        pool.wait_ready()
        pool.stop_requested = lambda: True  # as the trainer's flag says after a SIGTERM
        started = time.monotonic()
        with pytest.raises(ScoringAbandoned, match="still scoring 5 s after the stop"):
            pool.score([Sample(completion="sleep")] * 8)
        assert STOP_GRACE <= time.monotonic() - started < STOP_GRACE + 3
        # a round that ends within the grace is scored as usual, and the pool still works
        assert pool.score([Sample(completion="ab")]).values["judge"] == [2.01]


def test_a_batched_reward_that_hangs_stops_the_run_after_one_timeout(write_run, capsys):
    # 16 completions, one call, timeout 1 s: the call was given 16 s before it timed out
    rewards = [
        {
            "name": "callable",
            "label": "judge",
            "timeout": 1,
            "params": {"function": "rewards.py:hang"},
        }
    ]
    config = write_run(rewards=rewards, training={"per_device_train_batch_size": 4})
    assert main(["train", "--allow-code", str(config)]) == 1
    printed = capsys.readouterr()
    (line,) = [x for x in printed.err.splitlines() if x.startswith("error: ")]
    assert "reward 'judge' failed on 16 of 16 calls" in line
    assert "reward 'judge' timed out after 1s" in printed.out + printed.err
    assert list_checkpoints(config.parent / "out") == []


def test_sigterm_while_a_reward_hangs_ends_the_run_in_seconds(write_run):
    # Step 1 is scored; step 2's call never returns (its timeout is 10 minutes). SIGTERM to
    # the process group: the run used to wait for the call ("finishing this step"); now the
    # round is abandoned after STOP_GRACE, step 2 discarded and step 1 saved.
    rewards = [
        {
            "name": "callable",
            "label": "judge",
            "timeout": 600,
            "params": {"function": "rewards.py:hang_from_step_2"},
        }
    ]
    config = write_run(rewards=rewards, training={"max_steps": 4})
    marker = config.parent / "scoring"
    env = {**os.environ, "RLVR_TEST_SCORING_MARKER": str(marker)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr", "train", "--allow-code", str(config)],
        cwd=config.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not marker.with_name("scoring.2").exists():  # step 2's call hangs now
            assert proc.poll() is None and time.monotonic() < deadline, "no step 2"
            time.sleep(0.05)
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGTERM)
        signalled = time.monotonic()
        text = proc.communicate(timeout=60)[0].decode(errors="replace")
        took = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, text
    assert took < STOP_GRACE + 20, (took, text)
    assert "stopped at step 1 (checkpoint in " in text, text
    assert "step 2 discarded: the rewards were still scoring 5 s after the stop" in text, text
    out = config.parent / "out"
    assert [m["step"] for m in read_metrics(out)] == [1]
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-1"]


def _raise(params):
    def reward(sample):
        raise ValueError("no rule")

    return reward


def test_scoring_stops_once_the_error_share_is_certain_to_be_exceeded():
    samples = [Sample(completion=str(i)) for i in range(16)]
    with RewardPool([PoolSpec("bad", _raise)], workers=0) as pool:
        result = pool.score(samples, max_error_frac=0.5)  # 9 failures of 16 pass 0.5
        assert result.errors["bad"] == 9 and result.values["bad"][9:] == [None] * 7
        assert "failed on 9 of the 16 calls already" in str(result.stopped)
        whole = pool.score(samples)  # without a share, every call is made
        assert whole.errors["bad"] == 16 and whole.stopped is None


@pytest.mark.parametrize("frac", [1.0, None])
def test_no_share_means_no_early_stop(frac):
    samples = [Sample(completion=str(i)) for i in range(4)]
    with RewardPool([PoolSpec("bad", _raise)], workers=0) as pool:
        assert pool.score(samples, max_error_frac=frac).errors["bad"] == 4
