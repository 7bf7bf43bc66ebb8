"""The built-in ``callable`` reward: TRL-style reward functions used as they are."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

# tests/ on sys.path (and so in the reward workers, which get the parent's sys.path).
TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

import trl_rewards  # noqa: E402

from rlvr.api.host import create_host  # noqa: E402
from rlvr.api.registration import Sample, TrainerState  # noqa: E402
from rlvr.config.schema import ConfigError  # noqa: E402
from rlvr.plugins.rewards.callable import (  # noqa: E402
    CallableParams,
    CallableReward,
    check_function,
)
from rlvr.rewards.scoring import ScoreEntry, Scorer  # noqa: E402
from rlvr.testing import check_reward, validate_config  # noqa: E402

MODULE = "trl_rewards"
FILE = str(TESTS / "trl_rewards.py")


@pytest.fixture(scope="module")
def host():
    return create_host()


def reward(function: str, **params) -> CallableReward:
    return CallableReward(CallableParams(function=function, **params))


class One:
    """A batched reward called on one sample at a time: its one value."""

    def __init__(self, fn: CallableReward) -> None:
        self.fn = fn

    def __call__(self, sample: Sample):
        (value,) = self.fn([sample]).values
        return value


def one(function: str, **params) -> One:
    return One(reward(function, **params))


# --------------------------------------------------------------------------- params


@pytest.mark.parametrize(
    "spec",
    [f"{MODULE}:digits_reward", "pkg.sub.mod:fn", "m:Class.method", f"{FILE}:digits_reward"],
)
def test_accepts_module_and_file_forms(spec):
    assert CallableParams(function=spec).function.endswith(spec.split("/")[-1])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("digits_reward", "not 'module:function'"),
        ("trl_rewards:", "not 'module:function'"),
        (":fn", "not 'module:function'"),
        ("my-rewards:fn", "neither a dotted module name"),
        ("trl_rewards:bad-name", "not a Python name"),
        ("rewards/mine:fn", "neither a dotted module name"),
    ],
)
def test_rejects_malformed_functions(spec, message):
    with pytest.raises(ValidationError, match=message):
        CallableParams(function=spec)


def test_relative_file_resolved_against_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    params = CallableParams(function="rewards/mine.py:fn")
    assert params.function == f"{tmp_path}/rewards/mine.py:fn"


def test_kwargs_must_be_keyword_names():
    with pytest.raises(ValidationError, match="cannot be keyword arguments"):
        CallableParams(function="m:f", kwargs={"completions": 1})
    with pytest.raises(ValidationError, match="cannot be keyword arguments"):
        CallableParams(function="m:f", kwargs={"trainer_state": 1})
    with pytest.raises(ValidationError, match="unknown|Extra"):
        CallableParams(function="m:f", kwrgs={})


def test_validation_imports_nothing(tmp_path, monkeypatch):
    """Neither the params model nor the config check runs the user's module."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "explosive.py").write_text(
        "raise RuntimeError('imported at validation')\n\ndef fn(completions, **kw):\n    pass\n"
    )
    config = validate_config(
        {"rewards": [{"name": "callable", "params": {"function": "explosive:fn"}}]}
    )
    assert config.rewards[0].params.function == "explosive:fn"
    assert "explosive" not in sys.modules
    validate_config({"rewards": [{"name": "callable", "params": {"function": "explosive.py:fn"}}]})


# --------------------------------------------------------------------------- the call


def test_called_like_trl_standard_format():
    trl_rewards.CALLS.clear()
    fn = one(f"{MODULE}:record", kwargs={"bonus": 2})
    row = {"prompt": "What is 2+2?", "answer": "4", "level": 1, "completion": "x"}
    assert fn(Sample(completion="4", prompt="<chat>What is 2+2?", row=row)) == 1.0
    (call,) = trl_rewards.CALLS
    assert callable(call.pop("log_extra")) and callable(call.pop("log_metric"))
    assert call == {
        "prompts": ["<chat>What is 2+2?"],
        "completions": ["4"],
        "completion_ids": None,  # a sample without tokens
        "answer": ["4"],
        "level": [1],
        "bonus": 2,
        "trainer_state": TrainerState(),
    }


def test_called_like_trl_conversational_format():
    trl_rewards.CALLS.clear()
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    fn = one(f"{MODULE}:record")  # format auto: the row's prompt is a list of messages
    fn(Sample(completion="4", prompt="templated", row={"prompt": messages}))
    (call,) = trl_rewards.CALLS
    assert call["prompts"] == [messages]
    assert call["completions"] == [[{"role": "assistant", "content": "4"}]]

    trl_rewards.CALLS.clear()
    one(f"{MODULE}:record", format="conversational")(Sample(completion="4", prompt="2+2?"))
    assert trl_rewards.CALLS[0]["prompts"] == [[{"role": "user", "content": "2+2?"}]]
    trl_rewards.CALLS.clear()
    one(f"{MODULE}:record", format="standard")(Sample(completion="4", row={"prompt": messages}))
    assert trl_rewards.CALLS[0]["completions"] == ["4"]


def test_values_none_and_bad_returns():
    gsm8k = one(f"{MODULE}:correctness_reward_func")
    row = {"prompt": [{"role": "user", "content": "q"}], "answer": "72"}
    assert gsm8k(Sample(completion="<answer>72</answer>", row=row)) == 2.0
    assert gsm8k(Sample(completion="<answer>7</answer>", row=row)) == 0.0
    assert one(f"{MODULE}:length_if_tagged")(Sample(completion="no tag")) is None
    assert one(f"{FILE}:Scorer.exact")(Sample(completion=" 4", row={"answer": "4"})) == 1.0
    for bad in ("two_values", "not_a_list"):
        with pytest.raises(TypeError, match=f"{MODULE}:{bad} returned .* for 1 completions"):
            one(f"{MODULE}:{bad}")(Sample(completion="x"))


def test_missing_function_fails_in_the_factory():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        reward(f"{MODULE}:nope")
    with pytest.raises(FileNotFoundError):
        reward("/nonexistent/rewards.py:fn")


# --------------------------------------------------------------------------- worker pool


def entry(label: str, function: str, weight: float = 1.0, **params) -> ScoreEntry:
    params = CallableParams(function=function, **params)
    return ScoreEntry(label, CallableReward, params, weight=weight, batch="call")


def test_scores_through_the_worker_pool():
    entries = [
        entry("digits", f"{MODULE}:digits_reward"),
        entry("digits_file", f"{FILE}:digits_reward", kwargs={"scale": 2.0}, weight=0.5),
        entry("tagged", f"{MODULE}:length_if_tagged"),
        entry("bad", f"{MODULE}:two_values"),
        entry("missing", f"{MODULE}:nope"),
    ]
    samples = [Sample(completion="12ab", row={"answer": "12"}), Sample(completion="<answer>")]
    with Scorer(entries, workers=2) as scorer:
        scores = scorer.score(samples)
    assert scores.per_reward["digits"] == [0.5, 0.0]
    assert scores.per_reward["digits_file"] == [1.0, 0.0]
    assert scores.per_reward["tagged"] == [None, 8.0]
    assert scores.total == [0.5 + 0.5 + 0.0 + 0.0 + 0.0, 8.0]
    assert scores.errors["bad"] == 2 and "one float" in scores.error_messages["bad"][0]
    assert scores.errors["missing"] == 2 and "nope" in scores.error_messages["missing"][0]


def test_conforms_to_the_reward_contract():
    values = check_reward("callable", params={"function": f"{MODULE}:digits_reward"}, workers=1)
    assert len(values) > 3 and all(0.0 <= v <= 1.0 for v in values)


# --------------------------------------------------------------------------- config check


def test_config_check_finds_typos_without_importing(tmp_path, monkeypatch, host):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_rewards.py").write_text(
        "import math\n\ndef correctness_reward_func(completions, **kw):\n    return [0.0]\n\n"
        "if __name__ == '__main__':\n    pass\n"
    )
    rewards = [
        {"name": "callable", "params": {"function": "my_rewards:correctness_reward_fun"}},
        {"name": "callable", "label": "b", "params": {"function": "missing.py:f"}},
        {"name": "callable", "label": "c", "params": {"function": "no_such_module:f"}},
        {"name": "callable", "label": "d", "params": {"function": "my_rewards:math"}},
        {"name": "callable", "label": "e", "params": {"function": "json.decoder:anything"}},
        {
            "name": "callable",
            "label": "f",
            "params": {"function": "my_rewards.py:correctness_reward_func"},
        },
    ]
    with pytest.raises(ConfigError) as info:
        validate_config({"rewards": rewards}, host=host)
    problems = dict(info.value.problems)
    assert set(problems) == {f"rewards[{i}].params.function" for i in (0, 1, 2, 4)}
    assert "did you mean 'correctness_reward_func'" in problems["rewards[0].params.function"]
    assert "no file" in problems["rewards[1].params.function"]
    assert "not importable" in problems["rewards[2].params.function"]
    # a submodule's source is found in its package's directory, never imported (#45 item 5)
    assert "decoder.py' defines no 'anything'" in problems["rewards[4].params.function"]


def test_check_function_is_lenient_when_it_cannot_tell(tmp_path):
    star = tmp_path / "star.py"
    star.write_text("from json import *\n")
    assert check_function(f"{star}:loads") is None
    dynamic = tmp_path / "dynamic.py"
    dynamic.write_text("def __getattr__(name):\n    return print\n")
    assert check_function(f"{dynamic}:anything") is None
    assert check_function("os.path:join") is None  # a submodule: left to the worker


def test_check_function_reports_a_syntax_error_with_its_line(tmp_path):
    """A file that cannot compile fails validation, not every reward call during training."""
    broken = tmp_path / "broken.py"
    broken.write_text("import re\n\ndef reward(completions, **kwargs)\n    return [1.0]\n")
    problem = check_function(f"{broken}:reward")
    assert problem == f"{str(broken)!r} line 3: SyntaxError: expected ':'; fix the file"
