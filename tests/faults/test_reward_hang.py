"""#35 item 13: a reward that hangs (an unreachable judge) cost ``timeout x calls / workers``
of silence per step before the error-share check could stop the run (12.5 minutes with the
defaults). Scoring now stops as soon as a reward's first calls all time out, or its failures
are certain to pass ``training.max_reward_error_frac``."""

from __future__ import annotations

import pytest

from rlvr.api.registration import Sample
from rlvr.cli.main import main
from rlvr.outputs.checkpoint import list_checkpoints
from rlvr.rewards.pool import PoolSpec, RewardPool


def test_a_reward_that_always_hangs_stops_the_run_after_its_first_timeouts(write_run, capsys):
    # 4 prompts x 4 completions: 16 calls of 1 s on 2 workers, 8 s of scoring before; the
    # first 4 timeouts (2 s) now tell.
    rewards = [
        {"name": "callable", "label": "digits", "params": {"function": "rewards.py:digits"}},
        {
            "name": "callable",
            "label": "judge",
            "timeout": 1,
            "params": {"function": "rewards.py:hang"},
        },
    ]
    config = write_run(
        rewards=rewards, training={"per_device_train_batch_size": 4, "reward_workers": 2}
    )
    assert main(["train", "--allow-code", str(config)]) == 1
    printed = capsys.readouterr()
    (line,) = [x for x in printed.err.splitlines() if x.startswith("error: ")]
    assert "step 1: reward 'judge' timed out on each of its first 4 calls (1 s each)" in line
    assert "looks stuck" in line and "the other 12 calls were not made" in line
    assert "0 errors and 4 timeouts in 16 calls" in printed.out + printed.err
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
