"""The ``verifiers`` environment: a real verifiers 0.4 environment (``tests/verifiers_env``:
a taskset package with its own in-process harness and ``@vf.reward`` rubric, written with
verifiers' own classes) run by rlvr's episode runner on the tiny model, then trained by name.

The harness reaches the model over HTTP through verifiers' interception server and rlvr's
OpenAI-compatible endpoint; the checks are that the tokens rlvr would train are exactly the
sampled ones plus the chat template's tokens for the harness's messages (mask 0), and that the
rubric's weighted rewards arrive as the episode's environment rewards.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from turn_ending import turn_ending_policy

import rlvr
from rlvr.api.runtime import Generation, RunInfo, SamplingParams
from rlvr.config.schema import DataConfig
from rlvr.data.prompts import PromptSet
from rlvr.model.loading import eos_token_ids
from rlvr.model.logprobs import completion_logprobs
from rlvr.plugins.backends.hf import HFGenerator
from rlvr.plugins.backends.params import HFParams
from rlvr.plugins.environments import verifiers as adapter
from rlvr.plugins.environments.params import VerifiersParams
from rlvr.rollout.batch import build_batch
from rlvr.rollout.completions import episode_completion
from rlvr.rollout.episodes import EpisodeLimits, EpisodeRunner

RUN = RunInfo(max_completion_length=6, num_generations=2, seed=0)
ENV_DIR = Path(__file__).parent / "verifiers_env"
FOLLOW_UP = "Check it: reply with the number only."

#: verifiers.v1 alone takes seconds to import, and an environment more to load.
needs_verifiers = pytest.mark.skipif(
    importlib.util.find_spec("verifiers") is None,
    reason="needs verifiers 0.4: pip install 'rlvr[verifiers]'",
)


@pytest.fixture(scope="module")
def env_package():
    """The local taskset package importable, as ``pip install`` would make it."""
    sys.path.insert(0, str(ENV_DIR))
    yield
    sys.path.remove(str(ENV_DIR))


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    """The tiny model, made to end its turns within a few tokens (tests/turn_ending.py), so
    episodes reach the harness's second turn and its end."""
    messages = [
        {"role": "system", "content": "You add numbers."},
        {"role": "user", "content": "1 + 2"},
    ]
    model, tok = turn_ending_policy(tiny_model_dir, messages)
    return model, tok


@pytest.fixture(scope="module")
def environment(env_package):
    return adapter.VerifiersEnvironment(VerifiersParams(env="rlvr-vf-arith"), RUN)


class Spy:
    """The hf generator, recording every call's prompts and outputs."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: list[tuple[list[list[int]], object]] = []

    def generate(self, prompts, n, sampling):
        out = self.inner.generate(prompts, n, sampling)
        self.calls.append(([list(p) for p in prompts], out))
        return out


def run_episodes(policy, env, rows, *, max_turns=4, n=2):
    model, tok = policy
    spy = Spy(HFGenerator(HFParams(), RUN, model, tok))
    runner = EpisodeRunner(
        environment=env,
        environment_name="verifiers",
        generator=spy,
        tokenizer=tok,
        prompts=PromptSet(rows, DataConfig(path="x", chat_template=True), tok, None),
        limits=EpisodeLimits(max_turns, 200, 30.0, 120.0, "hermes"),
        max_turn_tokens=6,
        eos_ids=eos_token_ids(model, tok),
    )
    episodes = runner.run(list(range(len(rows))), n, SamplingParams(max_tokens=6, seed=3))
    return runner, spy, episodes


@pytest.mark.usefixtures("env_package")
@needs_verifiers
@pytest.mark.slow
def test_verifiers_episodes_train_the_sampled_tokens_and_get_the_rubrics_rewards(
    policy, environment
):
    model, tok = policy
    rows = environment.rows()[:2]
    assert rows == [
        {"answer": "1", "broken": False, "prompt": "What is 0 + 1?", "task": 0},
        {"answer": "3", "broken": False, "prompt": "What is 1 + 2?", "task": 1},
    ]
    runner, spy, episodes = run_episodes(policy, environment, rows)
    assert len(episodes) == 4 and all(e.failed is None for e in episodes), [
        e.failed for e in episodes
    ]
    finished = [e for e in episodes if not e.truncated]
    assert finished, "no episode reached the harness's end"
    for e in episodes:
        # The episode's prompt is the harness's first request, rendered by rlvr.
        row = e.row
        question = f"What is {row['task']} + {row['task'] + 1}?"
        assert e.messages[:2] == [
            {"role": "system", "content": "You add numbers."},
            {"role": "user", "content": question},
        ]
        # Trained ids = the generate calls' outputs, each continuing from exactly the
        # episode's ids so far, with the environment's ids (mask 0) in between.
        rebuilt, mask = [], []
        for prompts, out in spy.calls:
            for k, p in enumerate(prompts):
                start = len(p) - len(e.prompt_ids)
                ids = out.token_ids[k]
                if p == e.prompt_ids + e.token_ids[:start] and (
                    e.token_ids[start : start + len(ids)] == ids
                ):
                    gap = e.token_ids[len(rebuilt) : start]
                    rebuilt += gap + ids
                    mask += [0] * len(gap) + [1] * len(ids)
                    break
        assert rebuilt == e.token_ids and mask == e.action_mask
    for e in finished:
        # Two turns; between them the template's tokens for the harness's user turn.
        assert e.turns == 2
        env_ids = [t for t, m in zip(e.token_ids, e.action_mask, strict=True) if m == 0]
        expected = f"\n<|im_start|>user\n{FOLLOW_UP}<|im_end|>\n<|im_start|>assistant\n"
        assert tok.decode(env_ids) == expected
        # The rubric: correct (weight 1) on the harness's last reply, turns (0.5 per reply).
        answer = str(2 * e.row["task"] + 1)
        assert e.rewards == {
            "correct": 1.0 if answer in e.final_text.strip() else 0.0,
            "turns": 1.0,
        }
    # The sampler's log-probs of the sampled tokens are what the trainer computes.
    items = [episode_completion(e) for e in episodes]
    for c in items:
        c.score = 0.0
    batch = build_batch(items, [], tok.pad_token_id)
    assert batch.action_mask is not None and batch.sampler_logp is not None
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
    assert torch.allclose(logp[sampled], batch.sampler_logp[sampled], atol=1e-4)
    assert [e.rewards["turns"] for e in episodes] == [1.0] * len(episodes)
    # rlvr stopping a harness mid-episode (max_turns) ends it as truncated, not failed.
    runner2, _, stopped = run_episodes(policy, environment, rows[:1], max_turns=1, n=1)
    assert [(e.failed, e.truncated, e.rewards) for e in stopped] == [(None, True, {})]
    assert environment.episodes == {}
    runner.loop.run([(environment.aclose(), 30.0)])
    runner.close()
    runner2.close()


@pytest.mark.usefixtures("env_package")
class Scripted:
    """A generator that "samples" the given assistant turns, in order, each ended by the
    end-of-turn token (log-prob 0): a model that calls a tool, which the tiny one never does."""

    def __init__(self, tok, eos, turns):
        self.turns = [tok(t, add_special_tokens=False)["input_ids"] + [eos] for t in turns]
        self.calls = 0

    def generate(self, prompts, n, sampling):
        ids = [list(self.turns[min(self.calls, len(self.turns) - 1)]) for _ in prompts]
        self.calls += 1
        return Generation(ids, ["" for _ in ids], [False] * len(ids), [[0.0] * len(i) for i in ids])


@needs_verifiers
@pytest.mark.slow
@pytest.mark.skipif(shutil.which("uv") is None, reason="verifiers' bash harness installs with uv")
def test_verifiers_own_bash_harness_runs_a_tool_call_through_rlvr(policy):
    """verifiers' built-in ``bash`` harness (its chat program, launched with uv in a
    subprocess, streaming): the model's tool call runs in the runtime and its result comes
    back as a tool message, appended as the template's tokens for it (mask 0)."""
    model, tok = policy
    sys.path.insert(0, str(ENV_DIR))
    try:
        env = adapter.VerifiersEnvironment(
            VerifiersParams(env="rlvr-vf-arith", harness={"id": "bash"}), RUN
        )
    finally:
        sys.path.remove(str(ENV_DIR))
    call = (
        '<tool_call>\n{"name": "bash", "arguments": {"command": "echo $((1 + 2))"}}\n</tool_call>'
    )
    gen = Scripted(tok, eos_token_ids(model, tok)[0], [call, "3"])
    runner = EpisodeRunner(
        environment=env,
        environment_name="verifiers",
        generator=gen,
        tokenizer=tok,
        prompts=PromptSet(env.rows()[1:2], DataConfig(path="x", chat_template=True), tok, None),
        limits=EpisodeLimits(4, 400, 300.0, 600.0, "hermes"),
        max_turn_tokens=64,
        eos_ids=eos_token_ids(model, tok),
    )
    [e] = runner.run([0], 1, SamplingParams(max_tokens=64, seed=0))
    runner.loop.run([(env.aclose(), 30.0)])
    runner.close()
    assert e.failed is None and not e.truncated and e.turns == 2
    assert e.tools and e.tools[0]["function"]["name"] == "bash"
    tool = [m for m in e.messages if m["role"] == "tool"]
    assert [(m["name"], m["content"]) for m in tool] == [("bash", "3\n")]
    assert e.rewards == {"correct": 1.0, "turns": 1.0}
    # trained: the first scripted turn, the template's tokens for the tool result, the second
    first, second = gen.turns
    env_ids = e.token_ids[len(first) : len(e.token_ids) - len(second)]
    assert e.token_ids == first + env_ids + second
    assert e.action_mask == [1] * len(first) + [0] * len(env_ids) + [1] * len(second)
    # The tiny model's ChatML renders no tools: the result is written as hermes text
    # (<tool_response>), as the episode wrote it (rlvr.rollout.template_tools).
    from rlvr.rollout.template_tools import for_template, template_tools

    messages, tools = for_template(e.messages[:-1], e.tools, "hermes", template_tools(tok))
    rendered = tok.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )
    assert rendered.endswith(tok.decode(env_ids)) and "3\n" in tok.decode(env_ids)


@needs_verifiers
@pytest.mark.slow
def test_a_failing_rubric_fails_its_episode_not_the_run(policy, caplog):
    broken = adapter.VerifiersEnvironment(
        VerifiersParams(env="rlvr-vf-arith", args={"broken": True}), RUN
    )
    runner, _, episodes = run_episodes(policy, broken, broken.rows()[:1], n=2)
    finished = [e for e in episodes if e.turns == 2 and not e.truncated]
    assert finished and all("the grader broke" in str(e.failed) for e in finished)
    assert "the grader broke" in caplog.text and runner.last_counts["env/failed"] >= 1
    runner.loop.run([(broken.aclose(), 30.0)])
    runner.close()


def test_without_verifiers_the_environment_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "verifiers.v1", None)  # import verifiers.v1 now fails
    with pytest.raises(rlvr.RlvrError, match=r"pip install 'rlvr\[verifiers\]'"):
        adapter.VerifiersEnvironment(VerifiersParams(env="anything"), RUN)


def test_sampled_tool_calls_reach_the_harness_as_openai_tool_calls():
    calls = [
        {"type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}},
        {"type": "function", "function": {"name": "", "arguments": {}}, "error": "bad JSON"},
    ]
    reply = adapter._completion("m", '<tool_call>{"name": "add"}</tool_call>', calls)
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    [call] = choice["message"]["tool_calls"]  # the unreadable call is left out
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "add", "arguments": '{"a": 1, "b": 2}'}
    # streamed (verifiers' own chat program streams): the whole turn in one chunk
    first, last, usage = adapter._chunks(reply, usage=True)
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"]["tool_calls"] == [{"index": 0, **call}]
    assert last["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "tool_calls"}
    assert usage["choices"] == [] and "usage" in usage
    # ... and the harness's echo of them and its tool results, as the chat template takes them
    echoed = adapter._message(
        {"role": "assistant", "content": [{"type": "text", "text": "x"}], "tool_calls": [call]}
    )
    assert echoed["content"] == "x"
    assert echoed["tool_calls"][0]["function"]["arguments"] == {"a": 1, "b": 2}


def test_a_harness_that_rewrites_the_conversation_fails_its_episode():
    sent = [
        {"role": "user", "content": "What is 1 + 2?"},
        {"role": "assistant", "content": "3"},
    ]
    more = [{"role": "user", "content": "Sure?"}]
    assert adapter._added(sent, [*sent, *more]) == more
    with pytest.raises(RuntimeError, match="rewrote message 0"):
        adapter._added(sent, [{"role": "user", "content": "What is 2 + 2?"}, sent[1], *more])
    with pytest.raises(RuntimeError, match="dropped or compacted"):
        adapter._added(sent, [sent[1]])


@needs_verifiers
@pytest.mark.slow
def test_an_unknown_verifiers_environment_is_one_error_line():
    with pytest.raises(rlvr.RlvrError, match="cannot load verifiers environment 'no-such-env'"):
        adapter.VerifiersEnvironment(VerifiersParams(env="no-such-env"), RUN)


@pytest.mark.usefixtures("env_package")
@needs_verifiers
@pytest.mark.slow
def test_a_run_trains_on_a_verifiers_environment_by_name(tmp_path, policy):
    model, tok = policy
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    rows = tmp_path / "rows.jsonl"
    assert adapter.write_rows("rlvr-vf-arith", str(rows), {"size": 2}) == 2
    config = {
        "model": {"name_or_path": str(tmp_path / "model")},
        "data": {"path": str(rows), "chat_template": True},
        "rewards": [{"name": "numbers"}],  # rlvr's own, on the rows' answer, beside the rubric
        "environment": {
            "name": "verifiers",
            "params": {"env": "rlvr-vf-arith", "args": {"size": 2}},
            "max_turns": 3,
            "max_episode_tokens": 64,
        },
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
    rlvr.train(config, progress=False)
    metrics = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").open()]
    steps = [m for m in metrics if "env/episodes" in m]
    assert len(steps) == 2, steps
    assert all(m["env/episodes"] == 4 and m["env/failed"] == 0 for m in steps), steps
    assert any(m.get("rewards/turns/mean") == 1.0 for m in steps), steps
    assert all(m["sampler/logp_gap_mean"] < 1e-3 for m in steps)
