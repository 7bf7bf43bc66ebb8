"""``rlvr.testing.check_environment`` and ``rlvr env check``: an environment's conformance
checks (each failure says what to fix) and episodes printed with their loss mask."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

import rlvr
from rlvr.cli import main as cli
from rlvr.testing import ConformanceError, check_environment

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'


# --------------------------------------------------------------------------- environments


class Echo:
    """A well-behaved environment: repeats the model's words, ends on the row's answer."""

    def __init__(self, params, run):
        self.params = params

    async def start(self, row, prompt):
        return rlvr.EpisodeStart(messages=list(prompt), state={"answer": row["answer"], "n": 0})

    async def respond(self, state, message):
        state["n"] += 1
        if state["answer"] in message["content"]:
            return rlvr.EnvResponse(done=True, rewards={"solved": 1.0})
        return rlvr.EnvResponse(messages=[{"role": "user", "content": f"no ({state['n']})"}])

    async def close(self, state):
        pass


class OnSelf(Echo):
    """Keeps the episode's answer on the object: a second episode overwrites it."""

    async def start(self, row, prompt):
        self.answer = row["answer"]
        return rlvr.EpisodeStart(messages=list(prompt), state={"n": 0})

    async def respond(self, state, message):
        state["n"] += 1
        if self.answer in message["content"]:
            return rlvr.EnvResponse(done=True, rewards={"solved": 1.0})
        return rlvr.EnvResponse(messages=[{"role": "user", "content": f"not {self.answer}"}])


class NanReward(Echo):
    async def respond(self, state, message):
        return rlvr.EnvResponse(done=True, rewards={"score": math.nan})


class PlainStart(Echo):
    async def start(self, row, prompt):
        return list(prompt)


class BadTool(Echo):
    async def start(self, row, prompt):
        tool = {"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}
        return rlvr.EpisodeStart(messages=list(prompt), tools=[tool], state={"answer": "42"})


class RaisesOnToolCall(Echo):
    async def respond(self, state, message):
        if message.get("tool_calls"):
            raise KeyError("arguments")
        return await super().respond(state, message)


class CloseNeedsRespond(Echo):
    async def close(self, state):
        del state["seen"]  # set only once respond ran

    async def respond(self, state, message):
        state["seen"] = True
        return await super().respond(state, message)


class NeedsKey(rlvr.Params):
    key: str


def record(factory, params=rlvr.Params, name="probe"):
    return rlvr.Environment(name=name, params=params, factory=factory, description="a probe")


# --------------------------------------------------------------------------- check_environment


def test_the_built_in_tools_environment_passes_and_its_episodes_come_back():
    rows = [{"prompt": "What is 6 * 7?"}]
    (t,) = check_environment("tools", rows=rows, script=[CALL, "It is 42."])
    assert t.done and t.turns == 2
    assert [m["role"] for m in t.messages] == ["user", "assistant", "tool", "assistant"]
    assert t.messages[2]["content"] == "42"
    assert t.tools[0]["function"]["name"] == "calculator"
    check_environment("single_turn")  # the default probe script


def test_a_well_behaved_environment_passes_with_its_rewards():
    done = check_environment(record(Echo), script=["hm", "72"])
    assert [t.rewards for t in done] == [{}, {"solved": 1.0}]  # rows: answer 42, then 72
    assert [t.done for t in done] == [False, True]


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (OnSelf, "two episodes run concurrently interfere: row 0's episode went otherwise"),
        (NanReward, "reward 'score' = nan is not a finite float"),
        (PlainStart, "returned [{'role': 'user'"),
        (BadTool, "tool 'f': parameters must be a JSON schema of type \"object\""),
        (RaisesOnToolCall, "turn 2 raised KeyError: 'arguments'"),
        (CloseNeedsRespond, "close(state) right after start raised KeyError: 'seen'"),
    ],
)
def test_a_broken_environment_fails_with_what_to_fix(factory, message):
    with pytest.raises(ConformanceError, match="environment 'probe'") as info:
        check_environment(record(factory))
    assert message in str(info.value), str(info.value)


def test_state_on_self_is_named_with_the_fix():
    with pytest.raises(ConformanceError) as info:
        check_environment(record(OnSelf))
    assert "EpisodeStart(state=...)" in str(info.value)
    assert "not 42" in str(info.value) and "not 72" in str(info.value)


def test_params_whose_defaults_do_not_validate_are_reported():
    with pytest.raises(ConformanceError, match="defaults are not valid on their own"):
        check_environment(record(Echo, NeedsKey))
    check_environment(record(Echo, NeedsKey), params={"key": "x"})


def test_it_runs_from_async_code_too():
    async def inside_a_loop():
        return check_environment("tools", rows=[{"prompt": "6 * 7?"}], script=[CALL, "42"])

    (t,) = asyncio.run(inside_a_loop())
    assert t.done and t.messages[2]["content"] == "42"


def test_a_sync_environment_is_refused():
    class Sync:
        def __init__(self, params, run):
            pass

        def start(self, row, prompt): ...
        def respond(self, state, message): ...
        def close(self, state): ...

    with pytest.raises(ConformanceError, match=r"start\(\) \(must be async def\)"):
        check_environment(record(Sync))


# --------------------------------------------------------------------------- rlvr env check


PLUGIN = """
import rlvr

class Flaky:
    def __init__(self, params, run):
        self.params = params

    async def start(self, row, prompt):
        if self.params.broken:
            raise RuntimeError("cannot reach the task server")
        return rlvr.EpisodeStart(messages=list(prompt), state={"answer": row["answer"]})

    async def respond(self, state, message):
        if state["answer"] in message["content"]:
            return rlvr.EnvResponse(done=True, rewards={"solved": 1.0})
        return rlvr.EnvResponse(messages=[{"role": "user", "content": "try again"}])

    async def close(self, state):
        pass

class FlakyParams(rlvr.Params):
    broken: bool = False

@rlvr.hookimpl
def rlvr_register_environments(register):
    register(rlvr.Environment(name="flaky", params=FlakyParams, factory=Flaky,
                              description="a probe"))
"""


def test_env_check_prints_the_loss_mask_rewards_and_turns(tmp_path, capsys):
    script = tmp_path / "script.yaml"
    script.write_text(json.dumps([CALL, "The answer is 42."]))
    code = cli.main(["env", "check", "tools", "--script", str(script), "--episodes", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "conformance: OK" in out
    masked = out.split("[environment, loss mask 0: masked; ")[1].split("[sampled")[0]
    assert "<|im_start|>tool\n    42<|im_end|>" in masked  # the tool's answer: not trained
    trained = out.split("[sampled, loss mask 1: trained; ")
    assert len(trained) == 3 and "The answer is 42." in trained[2]
    assert "turns: 2, tool calls: 1" in out and ", done" in out


def test_env_check_with_a_model_and_rows(tmp_path, capsys, fake_dist, tiny_model_dir):
    fake_dist("rlvr-flaky", "rlvr_flaky", {"flaky": "rlvr_flaky"}, PLUGIN)
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "2 + 2?", "answer": "4"}\n{"prompt": "1 + 2?", "answer": "3"}\n')
    argv = ["env", "check", "flaky", "--data", str(rows), "--model", str(tiny_model_dir)]
    code = cli.main([*argv, "--episodes", "3", "--max-tokens", "5"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "environment 'flaky' (rlvr-flaky)" in out
    assert out.count("--- episode") == 3 and "--- episode 2 (row 0)" in out
    assert "[prompt: " in out and "2 + 2?" in out and "summary: 3 episodes, 0 failed" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["flakey"], "error: unknown environment 'flakey'; did you mean 'flaky'?"),
        (["flaky", "--set", "broke=1"], "error: environment 'flaky': bad params (broke: Extra"),
        (["flaky", "--set", "broken=true"], "start(row, prompt) on row 0 raised RuntimeError"),
        (["flaky", "--script", "nothing.yaml"], "error: --script 'nothing.yaml': no such file"),
        ([], "error: give the environment's NAME, or a run config with --config"),
    ],
)
def test_env_check_bad_input_is_one_error_line(argv, message, fake_dist, capsys):
    fake_dist("rlvr-flaky", "rlvr_flaky", {"flaky": "rlvr_flaky"}, PLUGIN)
    assert cli.main(["env", "check", *argv]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_env_check_of_a_run_config_scores_episodes_with_its_rewards(
    tmp_path, capsys, tiny_model_dir
):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"question": "What is 6 * 7?", "answer": "42"}\n')
    config = tmp_path / "run.yaml"
    config.write_text(
        f"model: {{name_or_path: {tiny_model_dir}}}\n"
        f"data: {{path: {rows}, prompt_field: question, system_prompt: Use the calculator.}}\n"
        "rewards: [{name: numbers}]\n"
        "environment: {name: tools, max_turns: 3, tool_call_format: hermes}\n"
    )
    script = tmp_path / "script.yaml"
    script.write_text(json.dumps([CALL, "It is 42."]))
    argv = ["env", "check", "--config", str(config), "--script", str(script), "--episodes", "1"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "<|im_start|>system\n    Use the calculator.<|im_end|>" in out  # the data config's
    assert "What is 6 * 7?" in out and "turns: 2, tool calls: 1" in out
    assert "config rewards (of the last assistant message): numbers=1; weighted sum 1" in out
    # --set reaches the config's environment params; NAME, if given, must be the config's
    assert cli.main([*argv, "--set", "max_calls_per_turn=0"]) == 2
    assert "environment.params.max_calls_per_turn" in capsys.readouterr().err
    assert cli.main([*argv[:2], "single_turn", *argv[2:]]) == 1
    assert "runs the environment 'tools', not 'single_turn'" in capsys.readouterr().err
