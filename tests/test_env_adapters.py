"""The environment adapters: ``openenv`` (an OpenEnv environment, served on 127.0.0.1 by
OpenEnv's own ``create_app`` or run in process) and ``trl_env`` (a class written for TRL's
``GRPOTrainer(environment_factory=...)``, unchanged). Each drives real episodes through rlvr's
episode runner on the tiny model, and trains two steps by name from a config.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from turn_ending import turn_ending_policy

import rlvr
from rlvr.api.host import build_environment, create_host
from rlvr.api.runtime import Generation, RunInfo, SamplingParams
from rlvr.config.schema import CodeOptInError, ConfigError, DataConfig, load_config
from rlvr.data.prompts import PromptSet
from rlvr.model.loading import eos_token_ids
from rlvr.plugins.backends.hf import HFGenerator
from rlvr.plugins.backends.params import HFParams
from rlvr.rollout.episodes import EpisodeLimits, EpisodeRunner

RUN = RunInfo(max_completion_length=6, num_generations=2, seed=0)

# --------------------------------------------------------------------------- a tiny OpenEnv env

#: A guess-the-number environment written with OpenEnv's own classes, as a user's file.
GUESS_ENV = '''
import re
from typing import Any, Optional

from openenv.core.env_server import Action, Environment, Observation, State


class GuessAction(Action):
    message: str


class GuessObservation(Observation):
    text: str = ""


def score(message: str, target: int) -> tuple[float, bool, str]:
    """(reward, done, reply) for one guess: +1 and done when right, else -0.25 and a hint."""
    digits = re.findall(r"\\d", message)
    if digits and int(digits[0]) == target:
        return 1.0, True, "correct!"
    if not digits:
        return -0.25, False, "say a digit"
    return -0.25, False, "higher" if int(digits[0]) < target else "lower"


class GuessEnvironment(Environment[GuessAction, GuessObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True
    TRIES = 3

    def __init__(self):
        super().__init__()
        self._state = State()
        self.target = 0

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any):
        self.target = int(kwargs.get("target", 7))
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(text=" Guess my digit.")

    def step(self, action: GuessAction, timeout_s: Optional[float] = None, **kwargs: Any):
        self._state.step_count += 1
        reward, done, reply = score(action.message, self.target)
        if not done and self._state.step_count >= self.TRIES:
            done, reply = True, "out of tries"
        return GuessObservation(text=reply, reward=reward, done=done)

    @property
    def state(self) -> State:
        return self._state
'''


@pytest.fixture(scope="module")
def guess_file(tmp_path_factory) -> Path:
    pytest.importorskip("openenv.core.env_server", reason="needs rlvr[openenv] (openenv-core)")
    path = tmp_path_factory.mktemp("guess") / "guess_env.py"
    path.write_text(GUESS_ENV)
    return path


@pytest.fixture(scope="module")
def guess_server(guess_file):
    """The environment served by OpenEnv's create_app with uvicorn on 127.0.0.1."""
    from openenv.core.env_server import create_app  # noqa: PLC0415 (optional package)

    from rlvr.api.usercode import load_function

    env_cls = load_function(f"{guess_file}:GuessEnvironment")
    module = sys.modules[env_cls.__module__]
    app = create_app(env_cls, module.GuessAction, module.GuessObservation, max_concurrent_envs=16)
    url, stop = serve(app)
    yield url, module
    stop()


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    """The tiny model made to end its turns within a few tokens (its end-of-turn token's
    output row pushed along the mean hidden state), so its episodes have several turns."""
    model, tok = turn_ending_policy(tiny_model_dir, "Guess my digit. lower 3")
    return model, tok


@pytest.fixture(scope="module")
def ending_model_dir(policy, tmp_path_factory) -> Path:
    """That model saved, for training runs whose episodes reach the environment's answers."""
    model, tok = policy
    path = tmp_path_factory.mktemp("ending") / "model"
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def make_runner(policy, env, rows, generator=None, *, max_turns=5, turn_timeout=20.0):
    model, tok = policy
    runner = EpisodeRunner(
        environment=env,
        environment_name="adapter",
        generator=generator or HFGenerator(HFParams(), RUN, model, tok),
        tokenizer=tok,
        prompts=PromptSet(rows, DataConfig(path="x", chat_template=True), tok, None),
        limits=EpisodeLimits(max_turns, 400, turn_timeout, 60.0, "hermes"),
        max_turn_tokens=6,
        eos_ids=eos_token_ids(model, tok),
    )
    return runner


def openenv_env(**params):
    host = create_host()
    config = load_config(
        {
            "model": {"name_or_path": "m"},
            "data": {"path": "d.jsonl"},
            "rewards": [],
            "environment": {"name": "openenv", "params": params},
        },
        host,
        require=("model",),
    )
    record = host.environments["openenv"]
    return build_environment(record, config.environment.params, RUN)


@pytest.mark.parametrize("where", ["served", "in_process"])
def test_openenv_episodes_carry_the_environments_observations_rewards_and_done(
    policy, guess_file, guess_server, where
):
    url, module = guess_server
    source = (
        {"url": url} if where == "served" else {"environment": f"{guess_file}:GuessEnvironment"}
    )
    env = openenv_env(**source, reset_fields=["target"], reward_name="guess")
    rows = [{"prompt": "Pick a digit.", "target": 3}, {"prompt": "Pick a digit.", "target": 8}]
    runner = make_runner(policy, env, rows)
    episodes = runner.run([0, 1], 2, SamplingParams(max_tokens=6, seed=3))
    runner.close()
    assert all(e.failed is None for e in episodes), [e.failed for e in episodes]
    for e in episodes:
        target = e.row["target"]
        # the reset observation is appended to the prompt's user message, as TRL does
        assert e.messages[0] == {"role": "user", "content": "Pick a digit. Guess my digit."}
        said = [m["content"] for m in e.messages if m["role"] == "assistant"]
        replies = [m["content"] for m in e.messages[2:] if m["role"] == "user"]
        assert len(said) == e.turns and len(replies) == e.turns  # every step was answered
        expected = [module.score(text, target) for text in said]
        # the environment, not max_turns (5), ended every episode: right or out of 3 tries
        assert e.done and not e.truncated and e.turns <= 3
        assert expected[-1][1] or e.turns == 3
        assert replies[:-1] == [reply for _, _, reply in expected[:-1]]
        assert e.rewards == {"guess": pytest.approx(sum(r for r, _, _ in expected))}
    assert {e.turns for e in episodes} - {1}, "no episode had several turns"


#: An MCP environment (OpenEnv's MCPEnvironment over a FastMCP server): its tools are the
#: model's; submit() ends the episode with a reward.
SUM_ENV = '''
from typing import Any, Optional

from fastmcp import FastMCP
from openenv.core.env_server import CallToolAction, Observation, State
from openenv.core.env_server.mcp_environment import MCPEnvironment


class SumObservation(Observation):
    text: str = ""


class SumEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        mcp = FastMCP("sum")

        @mcp.tool
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        @mcp.tool
        def submit(answer: int) -> str:
            """Submit the final answer."""
            return f"submitted {answer}"

        super().__init__(mcp)
        self._state = State()
        self.target = 0

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any):
        self.target = int(kwargs.get("target", 0))
        self._state = State(episode_id=episode_id)
        return SumObservation(text=" Use the tools.")

    async def step_async(self, action, timeout_s=None, **kwargs):
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        if isinstance(action, CallToolAction) and action.tool_name == "submit":
            observation.reward = 1.0 if action.arguments.get("answer") == self.target else 0.0
            observation.done = True
        return observation

    def _step_impl(self, action, timeout_s=None, **kwargs):
        return SumObservation(text="call a tool", reward=0.0)

    @property
    def state(self) -> State:
        return self._state
'''


def serve(app):
    """Run an ASGI app with uvicorn on 127.0.0.1 in a thread: ``(url, stop)``."""
    import uvicorn  # noqa: PLC0415 (a dependency of openenv-core, not of rlvr)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    assert server.started

    def stop():
        server.should_exit = True
        thread.join(10)

    return f"http://127.0.0.1:{port}", stop


@pytest.mark.parametrize("where", ["served", "in_process"])
def test_openenv_mcp_tools_are_the_models_tools(policy, tmp_path, where):
    pytest.importorskip("openenv.core.env_server", reason="needs rlvr[openenv] (openenv-core)")
    from openenv.core.env_server import (  # noqa: PLC0415 (optional package)
        CallToolAction,
        CallToolObservation,
        create_app,
    )

    from rlvr.api.usercode import load_function

    path = tmp_path / "sum_env.py"
    path.write_text(SUM_ENV)
    stop = None
    if where == "served":
        env_cls = load_function(f"{path}:SumEnvironment")
        app = create_app(env_cls, CallToolAction, CallToolObservation, max_concurrent_envs=8)
        url, stop = serve(app)
        source = {"url": url}
    else:
        source = {"environment": f"{path}:SumEnvironment"}
    env = openenv_env(**source, tools=True, reset_fields=["target"], reward_name="sum")
    model, tok = policy
    turns = [
        [call("add", a=2, b=3), call("submit", answer=5)],  # right: reward 1, done
        [call("add", a=1, b=1), "no idea"],  # an answer without a call ends it, no reward
        [call("mul", a=1, b=2), call("submit", answer=4)],  # unknown tool; wrong answer
    ]
    rows = [{"prompt": "Add 2 and 3.", "target": 5}]
    runner = make_runner(policy, env, rows, Scripted(tok, eos_token_ids(model, tok)[0], turns))
    try:
        episodes = runner.run([0], 3, SamplingParams(max_tokens=6, seed=0))
    finally:
        runner.close()
        if stop is not None:
            stop()
    assert all(e.failed is None and e.done and not e.truncated for e in episodes), [
        e.failed for e in episodes
    ]
    names = sorted(t["function"]["name"] for t in episodes[0].tools)
    assert names == ["add", "submit"]
    add = next(t for t in episodes[0].tools if t["function"]["name"] == "add")["function"]
    assert set(add["parameters"]["properties"]) == {"a", "b"}
    assert episodes[0].messages[0]["content"] == "Add 2 and 3. Use the tools."
    replies = [[m["content"] for m in e.messages if m["role"] == "tool"] for e in episodes]
    assert replies[0] == ["5", "submitted 5"]
    assert replies[1] == ["2"]
    assert replies[2][0].startswith("error:") and "mul" in replies[2][0]
    assert replies[2][1] == "submitted 4"
    assert [e.rewards for e in episodes] == [{"sum": 1.0}, {}, {"sum": 0.0}]
    assert [e.turns for e in episodes] == [2, 2, 2]


def test_a_server_at_capacity_fails_the_episodes_it_turns_away(policy, guess_file):
    from openenv.core.env_server import create_app  # noqa: PLC0415 (optional package)

    from rlvr.api.usercode import load_function

    env_cls = load_function(f"{guess_file}:GuessEnvironment")
    module = sys.modules[env_cls.__module__]
    url, stop = serve(create_app(env_cls, module.GuessAction, module.GuessObservation))
    env = openenv_env(url=url, reset_fields=["target"])  # the server allows one session
    runner = make_runner(policy, env, [{"prompt": "Pick a digit.", "target": 3}])
    try:
        episodes = runner.run([0], 3, SamplingParams(max_tokens=6, seed=3))
    finally:
        runner.close()
        stop()
    failed = [e.failed for e in episodes if e.failed is not None]
    # the refusal comes as the server's error or, by timing, as a bare close of the session
    assert len(failed) == 2 and all("capacity" in f for f in failed), failed
    (ok,) = [e for e in episodes if e.failed is None]
    assert ok.done and "openenv" in ok.rewards


def test_openenv_params_are_checked_before_anything_runs(guess_file):
    host = create_host()
    base = {"model": {"name_or_path": "m"}, "data": {"path": "d.jsonl"}, "rewards": []}
    with pytest.raises(ConfigError) as info:
        load_config(base | {"environment": {"name": "openenv"}}, host, require=("algorithm",))
    assert "exactly one of url" in str(info.value)
    spec = f"{guess_file}:GuessEnvironmnt"
    with pytest.raises(ConfigError) as info:
        entry = {"name": "openenv", "params": {"environment": spec}}
        load_config(base | {"environment": entry}, host, require=("algorithm",), allow_code=True)
    assert "did you mean 'GuessEnvironment'" in str(info.value)
    entry = {"name": "openenv", "params": {"environment": f"{guess_file}:GuessEnvironment"}}
    with pytest.raises(CodeOptInError, match="environment \\(openenv\\) imports and runs"):
        load_config(base | {"environment": entry}, host, require=("algorithm",))
    # a server's url runs nothing here: no opt-in needed
    entry = {"name": "openenv", "params": {"url": "http://127.0.0.1:1"}}
    load_config(base | {"environment": entry}, host, require=("algorithm",))


def train_config(tmp_path, model_dir, environment, rows):
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return {
        "model": {"name_or_path": str(model_dir), "dtype": "float32"},
        "data": {"path": str(path), "chat_template": True},
        "rewards": [{"name": "format", "weight": 0.1}],
        "environment": environment,
        "training": {
            "output_dir": str(tmp_path / "out"),
            "max_steps": 2,
            "num_generations": 2,
            "per_device_train_batch_size": 2,
            "max_completion_length": 6,
            "logging_steps": 1,
            "save_steps": 100,
            "report_to": [],
        },
    }


def test_a_run_trains_two_steps_with_an_openenv_environment(tmp_path, ending_model_dir, guess_file):
    environment = {
        "name": "openenv",
        "max_turns": 3,
        "params": {
            "environment": f"{guess_file}:GuessEnvironment",
            "reset_fields": ["target"],
            "reward_name": "guess",
        },
    }
    rows = [{"prompt": "Pick a digit.", "target": t} for t in (2, 5)]
    config = train_config(tmp_path, ending_model_dir, environment, rows)
    with pytest.raises(CodeOptInError):
        rlvr.train(config, progress=False)
    rlvr.train(config, progress=False, allow_code=True)
    steps = [m for m in rlvr.read_metrics(tmp_path / "out") if "env/episodes" in m]
    assert len(steps) == 2 and all(m["env/failed"] == 0 for m in steps)
    samples = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").open()]
    assert samples
    answered = [s for s in samples if len(s["transcript"]) > 2]  # the environment replied
    assert answered, "no episode reached the environment"
    for s in answered:
        said = [m["content"] for m in s["transcript"] if m["role"] == "assistant"]
        module = sys.modules[next(k for k in sys.modules if k.startswith("rlvr_callable_guess"))]
        want = sum(module.score(text, s["row"]["target"])[0] for text in said[:3])
        assert s["env_rewards"] == {"guess": pytest.approx(want)}, s


# --------------------------------------------------------------------------- TRL's classes

#: A user's environment_factory class, shaped as TRL's docs and examples write one (a plain
#: class: __init__ with no arguments, reset(**kwargs), tool methods with type hints and a
#: Google-style docstring, get_reward()).
TRL_ENV = '''
class IncrementEnv:
    def __init__(self):
        self._counter = 0
        self._target = 0

    def reset(self, target: int = 0, **kwargs) -> str:
        self._counter = 0
        self._target = int(target)
        return f" Reach {self._target}."

    def increment(self, a: int) -> int:
        """
        Increment the integer by a specified value

        Args:
            a: The value to increment by

        Returns:
            The incremented integer.
        """
        if a < 0:
            raise ValueError("only positive steps")
        self._counter += a
        return self._counter

    def get_reward(self) -> float:
        return 1.0 if self._counter == self._target else 0.0
'''


@pytest.fixture
def trl_file(tmp_path) -> Path:
    path = tmp_path / "my_env.py"
    path.write_text(textwrap.dedent(TRL_ENV))
    return path


def trl_env(factory):
    host = create_host()
    config = load_config(
        {
            "model": {"name_or_path": "m"},
            "data": {"path": "d.jsonl"},
            "rewards": [],
            "environment": {"name": "trl_env", "params": {"factory": factory}},
        },
        host,
        require=("model",),
    )
    return build_environment(host.environments["trl_env"], config.environment.params, RUN)


class Scripted:
    """A sampler that writes the given assistant turns (as the tiny model's tokens), so the
    episodes call tools; one turn list per episode, in order."""

    def __init__(self, tok, eos, turns: list[list[str]]):
        self.tok, self.eos, self.turns, self.calls = tok, eos, turns, 0

    def generate(self, prompts, n, sampling):
        live = [k for k, t in enumerate(self.turns) if len(t) > self.calls]
        assert len(live) == len(prompts)
        texts = [self.turns[k][self.calls] for k in live]
        self.calls += 1
        ids = [self.tok(t, add_special_tokens=False)["input_ids"] + [self.eos] for t in texts]
        return Generation(ids, texts, [False] * len(ids), [[0.0] * len(i) for i in ids])


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_a_trl_environment_factory_class_runs_unchanged(policy, trl_file):
    env = trl_env(f"{trl_file}:IncrementEnv")
    model, tok = policy
    turns = [
        [call("increment", a=2), call("increment", a=3), "done"],  # reaches 5: reward 1
        [call("increment", a=2) + call("decrement", a=1), "done"],  # unknown tool
        [call("increment", a=-1), "I give up"],  # the tool raises
        ["no tools at all"],
    ]
    rows = [{"prompt": "Count up.", "target": 5}, {"prompt": "Count up.", "target": 9}]
    runner = make_runner(policy, env, rows, Scripted(tok, eos_token_ids(model, tok)[0], turns))
    episodes = runner.run([0, 1], 2, SamplingParams(max_tokens=6, seed=0))
    runner.close()
    assert all(e.failed is None and e.done and not e.truncated for e in episodes)
    first = episodes[0]
    # reset()'s text is appended to the last user message; the methods are the tools
    assert first.messages[0] == {"role": "user", "content": "Count up. Reach 5."}
    assert [t["function"]["name"] for t in first.tools] == ["increment"]
    assert first.tools[0]["function"]["parameters"]["properties"]["a"]["type"] == "integer"
    tool_replies = [[m["content"] for m in e.messages if m["role"] == "tool"] for e in episodes]
    assert tool_replies[0] == ["2", "5"]
    assert tool_replies[1] == ["2", "{'error': 'Tool decrement not found.'}"]
    assert tool_replies[2] == ["{'error': 'only positive steps'}"]
    assert tool_replies[3] == []
    # get_reward() is the reward named after the class
    assert [e.rewards for e in episodes] == [{"IncrementEnv": r} for r in (1.0, 0.0, 0.0, 0.0)]
    assert [e.turns for e in episodes] == [3, 2, 2, 1]
    # the environment's tokens (tool results) are masked out of training
    for e in episodes:
        env_text = tok.decode(
            [t for t, m in zip(e.token_ids, e.action_mask, strict=True) if m == 0]
        )
        assert all(r in env_text for r in tool_replies[episodes.index(e)])
    # one instance per live episode, reused afterwards (TRL's pool)
    assert len(env.pool) == 4 and len({id(x) for x in env.pool}) == 4


def test_a_trl_episode_that_ends_without_an_answer_still_gets_its_reward(policy, trl_file):
    """TRL scores every rollout with get_reward(); so does rlvr, once an episode has ended,
    also when it never reached the environment (its first turn cut, max_turns)."""
    env = trl_env(f"{trl_file}:IncrementEnv")
    model, tok = policy
    eos = eos_token_ids(model, tok)[0]

    class Cut(Scripted):  # every turn runs out of tokens: the environment never answers
        def generate(self, prompts, n, sampling):
            out = super().generate(prompts, n, sampling)
            return Generation(out.token_ids, out.texts, [True] * len(prompts), out.logprobs)

    rows = [{"prompt": "Count up.", "target": 0}, {"prompt": "Count up.", "target": 3}]
    runner = make_runner(policy, env, rows, Cut(tok, eos, [["never"], ["ending"]]))
    cut = runner.run([0, 1], 1, SamplingParams(max_tokens=6, seed=0))
    runner.close()
    assert [(e.truncated, e.turns) for e in cut] == [(True, 1), (True, 1)]
    assert [e.rewards for e in cut] == [{"IncrementEnv": 1.0}, {"IncrementEnv": 0.0}]
    # max_turns ends an episode after a tool round: get_reward() sees the counter it left
    runner = make_runner(
        policy, env, rows[1:], Scripted(tok, eos, [[call("increment", a=3)]]), max_turns=1
    )
    stopped = runner.run([0], 1, SamplingParams(max_tokens=6, seed=0))
    runner.close()
    assert [e.rewards for e in stopped] == [{"IncrementEnv": 1.0}]


def test_a_trl_environment_factory_class_needs_reset(tmp_path):
    path = tmp_path / "bad_env.py"
    path.write_text("class NoReset:\n    def act(self, x: int) -> int:\n        return x\n")
    with pytest.raises(TypeError, match="without a reset\\(\\) method"):
        trl_env(f"{path}:NoReset")


def test_a_run_trains_two_steps_with_a_trl_environment_factory_class(
    tmp_path, ending_model_dir, trl_file
):
    environment = {
        "name": "trl_env",
        "max_turns": 2,
        "tool_call_format": "hermes",
        "params": {"factory": "my_env.py:IncrementEnv"},
    }
    rows = [{"prompt": "Count up.", "target": t} for t in (0, 3)]
    config_path = tmp_path / "config.yaml"
    config = train_config(tmp_path, ending_model_dir, environment, rows)
    config_path.write_text(json.dumps(config))  # JSON is YAML; my_env.py resolves beside it
    with pytest.raises(CodeOptInError, match=re.escape("environment (trl_env) imports and runs")):
        rlvr.train(config_path, progress=False)
    rlvr.train(config_path, progress=False, allow_code=True)
    steps = [m for m in rlvr.read_metrics(tmp_path / "out") if "env/episodes" in m]
    assert len(steps) == 2 and all(m["env/failed"] == 0 for m in steps)
    samples = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").open()]
    answered = [s for s in samples if not s["truncated"]]
    assert samples and answered
    # the random model calls no tool: the counter stays 0, so only target 0 is reached
    for s in answered:
        assert s["transcript"][0]["content"] == f"Count up. Reach {s['row']['target']}."
        want = 1.0 if s["row"]["target"] == 0 else 0.0
        assert s["env_rewards"] == {"IncrementEnv": want}, s


#: A TRL class whose synchronous reset() never returns on the rows marked ``hang`` (until the
#: module's RELEASE is set: the test process lets its threads go at the end).
HANGING_ENV = """
import threading

RELEASE = threading.Event()


class HangingEnv:
    def reset(self, hang: bool = False, **kwargs):
        if hang:
            RELEASE.wait()  # a synchronous call that never returns
        return None

    def get_reward(self) -> float:
        return 1.0
"""


def test_a_hung_synchronous_reset_fails_only_its_own_episodes(policy, tmp_path):
    """#45 item 19: one row of six whose reset() hangs, with as many episodes as asyncio's
    default thread pool has threads (so they would fill it): only that row's episodes fail,
    step after step; the others run as if it were not there."""
    path = tmp_path / "hanging_env.py"
    path.write_text(HANGING_ENV)
    env = trl_env(f"{path}:HangingEnv")
    module = sys.modules[env.cls.__module__]
    n = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default pool (6 on a 2-core machine)
    rows = [{"prompt": f"Count to {i}.", "hang": i == 3} for i in range(6)]
    runner = make_runner(policy, env, rows, max_turns=1, turn_timeout=1.0)
    try:
        for step in (1, 2):
            episodes = runner.run(list(range(6)), n, SamplingParams(max_tokens=4, seed=step))
            failed = [e.prompt_index for e in episodes if e.failed is not None]
            assert failed == [3] * n, (step, [(e.prompt_index, e.failed) for e in episodes])
            assert all(e.failed == "start timed out after 1s" for e in episodes[3 * n : 4 * n])
            assert runner.last_counts["env/failed"] == n
        # each hung call holds a daemon thread of its own, not a pool's
        hung = [t for t in threading.enumerate() if t.name.startswith("rlvr-env-call")]
        assert len(hung) == 2 * n and all(t.daemon for t in hung)
    finally:
        module.RELEASE.set()
        runner.close()


def test_a_run_whose_environment_hangs_ends_its_process(tmp_path, ending_model_dir):
    """#45 item 19: ``rlvr train`` with a reset() that never returns on one row of three exits
    once the run has finished (it stayed alive for minutes, the hung calls' pool threads
    joined at exit), and only that row's episodes failed."""
    (tmp_path / "hanging_env.py").write_text(HANGING_ENV)
    environment = {
        "name": "trl_env",
        "max_turns": 1,
        "turn_timeout": 2,
        "params": {"factory": "hanging_env.py:HangingEnv"},
    }
    rows = [{"prompt": f"Count to {i}.", "hang": i == 1} for i in range(3)]
    config = train_config(tmp_path, ending_model_dir, environment, rows)
    config["training"] |= {"max_steps": 1, "per_device_train_batch_size": 3}
    config_path = tmp_path / "config.yaml"
    config_path.write_text(json.dumps(config))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlvr", "train", str(config_path), "--allow-code"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 600
    while not any(x.startswith("run finished") for x in lines) and proc.poll() is None:
        assert time.monotonic() < deadline, "".join(lines)
        time.sleep(0.2)
    try:  # the run has finished: the process must be gone within seconds
        code = proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("the process stayed alive after its run finished") from None
    reader.join(timeout=5)
    assert any(x.startswith("run finished") for x in lines), "".join(lines)
    assert code == 0, "".join(lines)
    (m,) = rlvr.read_metrics(tmp_path / "out")
    assert m["env/episodes"] == 6 and m["env/failed"] == 2, m


#: A TRL class whose reset() raises on the rows marked ``broken``: a task server that is down.
BROKEN_ENV = """
class BrokenEnv:
    def reset(self, broken: bool = False, **kwargs):
        if broken:
            raise ConnectionError("task server offline")
        return None

    def get_reward(self) -> float:
        return 1.0
"""


def broken_run(tmp_path, model_dir, broken: list[bool], **training):
    """A config (written as config.yaml) of ``trl_env`` on BrokenEnv over rows in order."""
    (tmp_path / "broken_env.py").write_text(BROKEN_ENV)
    environment = {
        "name": "trl_env",
        "max_turns": 1,
        "params": {"factory": "broken_env.py:BrokenEnv"},
    }
    rows = [{"prompt": f"Count to {i}.", "broken": b} for i, b in enumerate(broken)]
    config = train_config(tmp_path, model_dir, environment, rows)
    config["data"]["shuffle"] = False
    config["training"] |= training
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps(config))
    return path


def test_a_run_whose_episodes_all_fail_stops_with_an_error_and_keeps_its_checkpoints(
    tmp_path, ending_model_dir, capsys
):
    """#45 items 3 and 20: step 2's episodes all fail (its rows' reset raises); the run stops
    there, before training on it, with one error line naming the first failure and a non-zero
    exit; step 1's checkpoint stays, and no checkpoint of step 2 is written."""
    from rlvr.cli.main import main

    config = broken_run(
        tmp_path, ending_model_dir, [False, False, True, True], max_steps=3, save_steps=1
    )
    capsys.readouterr()
    code = main(["train", str(config), "--allow-code"])
    err = capsys.readouterr().err
    assert code == 1, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert errors == [
        "error: step 2: 4 of 4 episodes of environment 'trl_env' failed, more than "
        "training.max_failed_episode_frac=0.5; the first: row 2: start raised ConnectionError: "
        "task server offline. Fix the environment (the warning above counts the failures "
        "by kind; `rlvr env check CONFIG` runs a few episodes alone), raise "
        "environment.turn_timeout/episode_timeout if its calls are only slow, or raise "
        "training.max_failed_episode_frac (1: never stop)"
    ]
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]
    assert [m["step"] for m in rlvr.read_metrics(out)] == [1]


def test_an_in_training_eval_whose_episodes_fail_stops_the_run_after_saving(
    tmp_path, ending_model_dir, capsys
):
    """The in-training eval follows the steps' rule: more than max_failed_episode_frac of
    its episodes failed (the eval rows' task server is down) and the run stops with one error
    line, the step before it saved and its metrics line written. Without that the run went on
    logging eval/pass@1 0.0 as if the model had been evaluated."""
    from rlvr.cli.main import main

    path = broken_run(
        tmp_path, ending_model_dir, [False] * 4, max_steps=3, eval_steps=2, eval_on_start=False
    )
    config = json.loads(path.read_text())
    eval_rows = tmp_path / "eval.jsonl"
    rows = [{"prompt": f"Count to {i}.", "broken": i != 1} for i in range(3)]
    eval_rows.write_text("\n".join(json.dumps(r) for r in rows))
    config["data"]["eval_path"] = str(eval_rows)
    path.write_text(json.dumps(config))
    capsys.readouterr()
    code = main(["train", str(path), "--allow-code"])
    err = capsys.readouterr().err
    assert code == 1, err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: the eval at step 2: 2 of 3 episodes of environment 'trl_env' failed, more "
        "than training.max_failed_episode_frac=0.5; the first: row 0: start raised "
        "ConnectionError: task server offline. Fix the environment"
    ), err
    out = tmp_path / "out"
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
    lines = rlvr.read_metrics(out)
    assert [m["step"] for m in lines] == [1, 2]
    assert lines[1]["eval/env/failed"] == 2 and "loss" in lines[1]
    # evaluated before training (eval_on_start, the default): it stops before the first step
    config["training"] |= {"eval_on_start": True, "output_dir": str(tmp_path / "out0")}
    path.write_text(json.dumps(config))
    assert main(["train", str(path), "--allow-code"]) == 1
    errors = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: the eval at step 0: 2 of 3 ")
    assert [m["step"] for m in rlvr.read_metrics(tmp_path / "out0")] == [0]
    assert not list((tmp_path / "out0").glob("checkpoint-*"))


def test_a_step_whose_episodes_all_failed_logs_no_reward(tmp_path, ending_model_dir, capsys):
    """#45 item 3: with max_failed_episode_frac: 1 the run goes on through a step whose every
    episode failed; that step has no reward to log (null, not 0.0), and the summary does not
    print 0.000 -> 0.000 as if it had been scored."""
    config = broken_run(
        tmp_path, ending_model_dir, [True, True], max_steps=1, max_failed_episode_frac=1.0
    )
    rlvr.train(config, progress=False, allow_code=True)
    (m,) = rlvr.read_metrics(tmp_path / "out")
    assert m["env/failed"] == 4 and m["env/episodes"] == 4
    assert m["reward"] is None and m["rewards/format/mean"] is None, m
    summary = (tmp_path / "out" / "run_summary.txt").read_text()
    assert "0.000 -> 0.000" not in summary and "none (no scored sample" in summary, summary


def test_eval_whose_episodes_all_fail_exits_with_an_error(tmp_path, ending_model_dir, capsys):
    """#45 item 20: ``rlvr eval`` where every episode failed exits non-zero with one error
    line (it printed accuracy 0.0% and exited 0); where some failed, its headline says so."""
    from rlvr.cli.main import main

    config = broken_run(tmp_path, ending_model_dir, [True, True, True])
    capsys.readouterr()
    code = main(["eval", str(config), "--allow-code", "--output", str(tmp_path / "eval")])
    captured = capsys.readouterr()
    assert code == 1, captured.err
    errors = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(
        "error: every one of the 3 episodes failed, so nothing was evaluated (the first: row 0: "
        "start raised ConnectionError: task server offline)"
    ), captured.err
    assert "3 of 3 episodes failed" in captured.out
    config = broken_run(tmp_path, ending_model_dir, [False, True, False])
    code = main(["eval", str(config), "--allow-code", "--output", str(tmp_path / "eval2")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "1 of 3 episodes failed (counted not correct)" in captured.out.splitlines()[0]
