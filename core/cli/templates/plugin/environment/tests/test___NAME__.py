"""Tests of the ``__NAME__`` environment plugin (with rlvr.testing)."""

from __future__ import annotations

import pytest
from rlvr import ConfigError
from rlvr.testing import check_environment, validate_config

NAME = "__NAME__"
ROWS = [{"prompt": "What is 6 * 7?", "answer": "42"}, {"prompt": "And 2 + 2?", "answer": "4"}]


def test_follows_the_plugin_contract():
    # Found by name through the entry point, as a config finds it (so: installed). The default
    # probe messages include malformed tool calls: the environment must answer them too.
    check_environment(NAME)


def test_a_right_answer_ends_the_episode_with_the_reward():
    first, second = check_environment(NAME, rows=ROWS, script=["It is 41.", "It is 42."])
    assert first.done and first.turns == 2 and first.rewards == {"solved": 1.0}
    assert first.messages[2] == {"role": "user", "content": "That is not right; try again."}
    assert not second.done and second.rewards == {}  # 4 is neither 41 nor 42; a try is left


def test_tries_run_out():
    (t,) = check_environment(NAME, params={"tries": 1}, rows=ROWS[:1], script=["no idea"])
    assert t.done and t.turns == 1 and t.rewards == {"solved": 0.0}


def test_usable_in_a_config():
    config = validate_config({"environment": {"name": NAME, "params": {"tries": 5}}})
    assert config.environment.params.tries == 5
    with pytest.raises(ConfigError, match="tries"):
        validate_config({"environment": {"name": NAME, "params": {"tries": 0}}})
