"""#35 item 13: a reward that hangs (an unreachable judge) cost ``timeout x calls / workers``
of silence per step before the error-share check could stop the run (12.5 minutes with the
defaults). Scoring now stops as soon as a reward's first calls all time out, or its failures
are certain to pass ``training.max_reward_error_frac``."""

from __future__ import annotations

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
from rlvr.rewards.pool import PoolSpec, RewardPool  # noqa: E402


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
