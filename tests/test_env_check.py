"""``rlvr.testing.check_environment`` and ``rlvr env check``: an environment's conformance
checks (each failure says what to fix) and episodes printed with their loss mask."""

from __future__ import annotations

import asyncio
import json
import math
import time
from types import MappingProxyType

import pytest
import torch

import rlvr
import rlvr.plugin
from rlvr.api.host import create_host
from rlvr.api.runtime import RunInfo, SamplingParams
from rlvr.cli import main as cli
from rlvr.cli.env_check import check_config
from rlvr.config.schema import ModelConfig
from rlvr.data.prompts import PromptSet
from rlvr.model.loading import eos_token_ids, load_policy
from rlvr.rollout.envcheck import DEFAULT_ROWS, ScriptedGenerator
from rlvr.rollout.episodes import episode_runner
from rlvr.testing import ConformanceError, check_environment

CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'


# --------------------------------------------------------------------------- environments


class Echo:
    """A well-behaved environment: repeats the model's words, ends on the row's answer."""

    def __init__(self, params, run):
        self.params = params

    async def start(self, row, prompt):
        return rlvr.plugin.EpisodeStart(
            messages=list(prompt), state={"answer": row["answer"], "n": 0}
        )

    async def respond(self, state, message):
        state["n"] += 1
        if state["answer"] in message["content"]:
            return rlvr.plugin.EnvResponse(done=True, rewards={"solved": 1.0})
        return rlvr.plugin.EnvResponse(messages=[{"role": "user", "content": f"no ({state['n']})"}])

    async def close(self, state):
        pass


class OnSelf(Echo):
    """Keeps the episode's answer on the object: a second episode overwrites it."""

    async def start(self, row, prompt):
        self.answer = row["answer"]
        return rlvr.plugin.EpisodeStart(messages=list(prompt), state={"n": 0})

    async def respond(self, state, message):
        state["n"] += 1
        if self.answer in message["content"]:
            return rlvr.plugin.EnvResponse(done=True, rewards={"solved": 1.0})
        return rlvr.plugin.EnvResponse(messages=[{"role": "user", "content": f"not {self.answer}"}])


class NanReward(Echo):
    async def respond(self, state, message):
        return rlvr.plugin.EnvResponse(done=True, rewards={"score": math.nan})


class PlainStart(Echo):
    async def start(self, row, prompt):
        return list(prompt)


class BadTool(Echo):
    async def start(self, row, prompt):
        tool = {"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}
        return rlvr.plugin.EpisodeStart(messages=list(prompt), tools=[tool], state={"answer": "42"})


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


class NeedsKey(rlvr.plugin.Params):
    key: str


def record(factory, params=rlvr.plugin.Params, name="probe"):
    return rlvr.plugin.Environment(name=name, params=params, factory=factory, description="a probe")


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
        (NanReward, "gave reward 'score' the value nan; a reward is a finite number"),
        (PlainStart, "start on row 0 returned list, not EpisodeStart"),
        (BadTool, "gave tool 'f' the parameters {'type': 3}; they are a JSON schema"),
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


class Blocks(Echo):
    """A respond that blocks the event loop (a synchronous wait inside an async method)."""

    async def respond(self, state, message):
        time.sleep(1000)


def test_a_blocking_environment_fails_the_check_within_its_limit():
    t0 = time.perf_counter()
    with pytest.raises(ConformanceError, match="blocked the event loop for over 1s") as info:
        check_environment(record(Blocks), timeout=1.0)
    assert time.perf_counter() - t0 < 15
    assert "asyncio.to_thread" in str(info.value)


# ------------------------------------------------- one validator: the check and training agree


class Returns(Echo):
    """Starts as :class:`Echo` (or with ``start``), then answers every message with
    ``response``."""

    def __init__(self, start=None, response=None):
        self.start_value, self.response = start, response

    async def start(self, row, prompt):
        if self.start_value is not None:
            return self.start_value(list(prompt))
        return await super().start(row, prompt)

    async def respond(self, state, message):
        return self.response


def _done(**rewards):
    return rlvr.plugin.EnvResponse(done=True, rewards=rewards)


BAD_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}

#: (case, start (None: Echo's), response, None when accepted else what the refusal says)
OUTPUTS = [
    ("a declared reward", None, _done(solved=1.0), None),
    ("a bool reward", None, _done(solved=True), None),
    ("an int reward", None, _done(solved=1), None),
    (
        "a read-only mapping",
        None,
        rlvr.plugin.EnvResponse(done=True, rewards=MappingProxyType({})),
        None,
    ),
    (
        "feedback, then more",
        None,
        rlvr.plugin.EnvResponse(messages=[{"role": "user", "content": "?"}]),
        None,
    ),
    (
        "an undeclared reward",
        None,
        _done(bonus=1.0),
        "gave reward 'bonus', which the environment does not",
    ),
    ("a NaN", None, _done(solved=math.nan), "gave reward 'solved' the value nan"),
    ("past the limit", None, _done(solved=1e7), "at most 1e+06 in magnitude"),
    ("a string", None, _done(solved="1"), "gave reward 'solved' the value '1'"),
    (
        "a list",
        None,
        rlvr.plugin.EnvResponse(done=True, rewards=[1.0]),
        "not a dict of named values",
    ),
    ("done not a bool", None, rlvr.plugin.EnvResponse(done="yes"), "gave done='yes', not a bool"),
    ("nothing, not done", None, rlvr.plugin.EnvResponse(), "returned no messages and done=False"),
    (
        "content not text",
        None,
        rlvr.plugin.EnvResponse(messages=[{"role": "user", "content": 3}]),
        "the chat template needs text",
    ),
    ("not an EnvResponse", None, {"done": True}, "returned dict, not EnvResponse"),
    ("start: a list", lambda p: p, _done(), "returned list, not EpisodeStart"),
    (
        "start: no messages",
        lambda p: rlvr.plugin.EpisodeStart(messages=[]),
        _done(),
        "returned no messages",
    ),
    (
        "start: a bad tool",
        lambda p: rlvr.plugin.EpisodeStart(messages=p, tools=[BAD_TOOL]),
        _done(),
        "gave tool 'f' the parameters",
    ),
]


class OutputsPlugin:
    @rlvr.plugin.hookimpl
    def rlvr_register_environments(self, register):
        for k, (_, start, response, _) in enumerate(OUTPUTS):
            register(
                rlvr.plugin.Environment(
                    name=f"case{k}",
                    params=rlvr.plugin.Params,
                    factory=lambda params, run, s=start, r=response: Returns(s, r),
                    description="one case of the table",
                    rewards=lambda params: ("solved",),
                )
            )


@pytest.fixture(scope="module")
def scripted_runner(tiny_model_dir):
    """A function running one training episode of an environment of :class:`OutputsPlugin`
    (through the trainer's episode runner factory): why it failed, or None."""
    host = create_host(plugins=[OutputsPlugin()])
    model, tok = load_policy(
        ModelConfig(name_or_path=str(tiny_model_dir)), device="cpu", dtype=torch.float32
    )
    eos = eos_token_ids(model, tok)

    def run(name):
        config = check_config(
            host,
            name,
            [],
            max_turns=2,
            max_tokens=8,
            turn_timeout=5.0,
            tool_format="hermes",
            seed=0,
        )
        prompts = PromptSet([dict(r) for r in DEFAULT_ROWS], config.data, tok, None)
        generator = ScriptedGenerator(tok, ["The answer is 42."], eos[0])
        info = RunInfo.from_config(config, num_generations=1, multi_turn=True)
        runner = episode_runner(config, host, info, generator, prompts, eos)
        try:
            (episode,) = runner.run([0], 1, SamplingParams(max_tokens=8, seed=0))
        finally:
            runner.close()
        return episode.failed

    return host, run


@pytest.mark.parametrize("k", range(len(OUTPUTS)), ids=[case[0] for case in OUTPUTS])
def test_the_check_and_training_accept_and_refuse_the_same_outputs(k, scripted_runner):
    host, run_episode = scripted_runner
    refused = OUTPUTS[k][3]
    failed = run_episode(f"case{k}")
    if refused is None:
        check_environment(f"case{k}", host=host)
        assert failed is None
    else:
        with pytest.raises(ConformanceError) as info:
            check_environment(f"case{k}", host=host)
        assert refused in str(info.value), str(info.value)
        assert failed is not None and refused in failed, failed


# --------------------------------------------------------------------------- rlvr env check


PLUGIN = """
import rlvr

class Flaky:
    def __init__(self, params, run):
        self.params = params

    async def start(self, row, prompt):
        if self.params.broken:
            raise RuntimeError("cannot reach the task server")
        return rlvr.plugin.EpisodeStart(messages=list(prompt), state={"answer": row["answer"]})

    async def respond(self, state, message):
        if state["answer"] in message["content"]:
            return rlvr.plugin.EnvResponse(done=True, rewards={"solved": 1.0})
        return rlvr.plugin.EnvResponse(messages=[{"role": "user", "content": "try again"}])

    async def close(self, state):
        pass

class FlakyParams(rlvr.plugin.Params):
    broken: bool = False

@rlvr.plugin.hookimpl
def rlvr_register_environments(register):
    register(rlvr.plugin.Environment(name="flaky", params=FlakyParams, factory=Flaky,
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
    # the tool's answer, not trained (in <tool_response>: the tiny model's template has none)
    assert "<|im_start|>tool\n    <tool_response>\n    42\n    </tool_response><|im_end|>" in masked
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
    # the data config's system prompt, then the tools (the tiny model's template shows none)
    assert "<|im_start|>system\n    Use the calculator.\n\n    # Tools\n" in out
    assert "What is 6 * 7?" in out and "turns: 2, tool calls: 1" in out
    assert "score: numbers=1; weighted total 1 (as training scores it)" in out
    # --set reaches the config's environment params; NAME, if given, must be the config's
    assert cli.main([*argv, "--set", "max_calls_per_turn=0"]) == 2
    assert "environment.params.max_calls_per_turn" in capsys.readouterr().err
    assert cli.main([*argv[:2], "single_turn", *argv[2:]]) == 1
    assert "runs the environment 'tools', not 'single_turn'" in capsys.readouterr().err


BLOCKING = """
import time
import rlvr

class Blocker:
    def __init__(self, params, run):
        pass

    async def start(self, row, prompt):
        return rlvr.plugin.EpisodeStart(messages=list(prompt))

    async def respond(self, state, message):
        time.sleep(1000)  # blocks the event loop

    async def close(self, state):
        pass

@rlvr.plugin.hookimpl
def rlvr_register_environments(register):
    register(rlvr.plugin.Environment(name="blocker", params=rlvr.plugin.Params, factory=Blocker,
                              description="a respond that blocks"))
"""


def test_env_check_of_a_blocking_environment_ends_within_its_limit(tmp_path, fake_dist, capsys):
    fake_dist("rlvr-blocker", "rlvr_blocker", {"blocker": "rlvr_blocker"}, BLOCKING)
    config = tmp_path / "run.yaml"
    config.write_text("environment: {name: blocker, turn_timeout: 1}\n")
    t0 = time.perf_counter()
    assert cli.main(["env", "check", "blocker", "--config", str(config)]) == 1
    assert time.perf_counter() - t0 < 30
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "respond(state, message) on row 0 turn 1 blocked the event" in err[0]


def test_env_check_names_the_environment_of_a_config_without_one(tmp_path, capsys, tiny_model_dir):
    """``rlvr env check single_turn -c quickstart.yaml``: the config has no ``environment:``
    section; the name on the command line is its environment."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"question": "What is 6 * 7?", "answer": "42"}\n')
    config = tmp_path / "run.yaml"
    config.write_text(
        f"model: {{name_or_path: {tiny_model_dir}}}\n"
        f"data: {{path: {rows}, prompt_field: question, chat_template: true}}\n"
        "rewards: [{name: numbers}]\n"
    )
    script = tmp_path / "script.yaml"
    script.write_text(json.dumps(["It is 42."]))
    argv = ["env", "check", "single_turn", "-c", str(config), "--script", str(script)]
    assert cli.main([*argv, "--episodes", "1"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "environment 'single_turn'" in out and "What is 6 * 7?" in out
    assert "score: numbers=1; weighted total 1 (as training scores it)" in out
    assert cli.main(["env", "check", "-c", str(config)]) == 2  # no name: the section is needed
    assert "needs a `environment:` section" in capsys.readouterr().err
