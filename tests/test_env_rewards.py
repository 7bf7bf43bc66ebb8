"""How rewards compose with environments: the environment's named rewards weighted in the
config and logged like any reward, rewards that score the final answer or the whole transcript,
and the group-level hook (of a reward and of an environment), on real episodes of the tiny
model."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from turn_ending import turn_ending_policy

import rlvr
from rlvr.api.host import create_host
from rlvr.api.registration import Sample
from rlvr.api.runtime import EnvResponse, EpisodeStart, RunInfo, SamplingParams
from rlvr.config.schema import ConfigError, DataConfig, ModelConfig, load_config
from rlvr.data.prompts import PromptSet
from rlvr.evaluation.correctness import correctness
from rlvr.model.loading import eos_token_ids, load_policy
from rlvr.plugins.backends.hf import HFGenerator
from rlvr.plugins.backends.params import HFParams
from rlvr.rewards.scoring import ScoreEntry, Scorer
from rlvr.rollout.completions import answer_ids, episode_completion
from rlvr.rollout.episodes import EpisodeLimits, EpisodeRunner
from rlvr.rollout.sampling import add_env_rewards, score

RUN = RunInfo(max_completion_length=6, num_generations=3, seed=0)
MARK = "<<fb>>"


@pytest.fixture(scope="module")
def eos_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model, made to end its turns within a few tokens (a random model almost never
    samples its end-of-turn token, and a turn cut at the token limit ends its episode before
    the environment answers it), saved for training runs."""
    model, tok = turn_ending_policy(tiny_model_dir, "What is 1 + 1? Natalia has 48 clips")
    out = tmp_path_factory.mktemp("eos") / "model"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


class Judge:
    """Three turns of feedback; ``solved`` after each answer (the last one counts), and a
    group-level ``rank``: 1 for the episode(s) with the longest conversation, 0 otherwise."""

    group_calls: list[int] = []

    def __init__(self, params=None, run=None):
        pass

    async def start(self, row, prompt):
        return EpisodeStart(messages=list(prompt), state={"turn": 0})

    async def respond(self, state, message):
        state["turn"] += 1
        done = state["turn"] >= 3
        return EnvResponse(
            messages=[{"role": "user", "content": f"{MARK} try {state['turn']} + 1 ="}],
            done=done,
            rewards={"solved": float(len(message["content"]) % 2), "turns": state["turn"]},
        )

    async def group_rewards(self, states, transcripts):
        Judge.group_calls.append(len(states))
        sizes = [len(t) for t in transcripts]
        return [{"rank": float(n == max(sizes))} for n in sizes]

    async def close(self, state):
        pass


class JudgePlugin:
    @rlvr.hookimpl
    def rlvr_register_environments(self, register):
        register(
            rlvr.Environment(
                name="judge",
                params=rlvr.Params,
                factory=Judge,
                description="feedback turns, a solved reward and a group rank",
                rewards=lambda params: ("solved", "turns", "rank"),
            )
        )


class Marks:
    """How many of the environment's feedback messages the reward's text holds."""

    def __init__(self, params=None):
        pass

    def __call__(self, sample: Sample) -> float:
        return float(sample.completion.count(MARK))


class GroupSpy:
    """Batched by group: each sample's value is its batch's size, and the batch must be one
    prompt's episodes, each carrying its conversation."""

    def __init__(self, params=None):
        pass

    def __call__(self, samples: list[Sample]) -> list[float]:
        assert len({s.group for s in samples}) == 1
        assert all(s.messages and s.messages[-1]["role"] in ("user", "assistant") for s in samples)
        return [float(len(samples))] * len(samples)


def run_episodes(model_dir, rows, n=3):
    model, tok = load_policy(
        ModelConfig(name_or_path=str(model_dir)), device=torch.device("cpu"), dtype=torch.float32
    )
    prompts = PromptSet(rows, DataConfig(path="x", chat_template=True), tok, None)
    runner = EpisodeRunner(
        environment=Judge(),
        environment_name="judge",
        generator=HFGenerator(HFParams(), RUN, model, tok),
        tokenizer=tok,
        prompts=prompts,
        limits=EpisodeLimits(4, 200, 5.0, 30.0, "hermes"),
        max_turn_tokens=6,
        eos_ids=eos_token_ids(model, tok),
    )
    episodes = runner.run(list(range(len(rows))), n, SamplingParams(max_tokens=6, seed=11))
    runner.close()
    return episodes, prompts, tok


def test_rewards_see_the_answer_or_the_transcript_and_whole_groups(eos_model_dir):
    Judge.group_calls.clear()
    rows = [{"prompt": "What is 1 + 1?"}, {"prompt": "Natalia has 48 clips."}]
    episodes, prompts, tok = run_episodes(eos_model_dir, rows)
    assert all(e.failed is None for e in episodes)
    # the environment's group hook: once per prompt, on its three episodes
    assert Judge.group_calls == [3, 3]
    assert all("rank" in e.rewards for e in episodes)
    for g in (0, 1):
        sizes = [len(e.messages) for e in episodes if e.group == g]
        ranked = [e.rewards["rank"] for e in episodes if e.group == g]
        assert ranked == [float(n == max(sizes)) for n in sizes]
    answered = [e for e in episodes if e.turns >= 2]
    assert answered, "no episode got past its first turn"
    items = [episode_completion(e) for e in episodes]
    entries = [
        ScoreEntry("answer_marks", Marks, weight=1.0),
        ScoreEntry("transcript_marks", Marks, weight=0.0, scope="transcript"),
        ScoreEntry("group_size", GroupSpy, weight=0.0, batch="group"),
    ]
    with Scorer(entries, workers=0) as scorer:
        score(scorer, prompts, items, [e.label for e in entries])
    for e, c in zip(episodes, items, strict=True):
        # feedback tokenized into the episode: one run of environment tokens each
        mask = e.action_mask
        runs = sum(1 for k, m in enumerate(mask) if m == 0 and (k == 0 or mask[k - 1]))
        assert c.rewards["transcript_marks"] == runs
        assert c.rewards["answer_marks"] == 0  # the final answer is the model's alone
        assert c.rewards["group_size"] == 3
        last = len(e.action_mask) - e.action_mask[::-1].index(1) if 1 in e.action_mask else 0
        assert answer_ids(c) == e.token_ids[last - len(answer_ids(c)) : last]
        assert c.text == tok.decode(answer_ids(c), skip_special_tokens=True)
    assert sum(c.rewards["transcript_marks"] for c in items) > 0
    # the environment's rewards join the score with their weights, as components of their own
    before = [c.score for c in items]
    stats = add_env_rewards(items, ["answer_marks"], {"solved": 2.0, "rank": 0.0})
    assert set(stats) == {"solved", "turns", "rank"}
    for b, c in zip(before, items, strict=True):
        env = c.env_rewards
        assert c.score == pytest.approx(b + 2.0 * env.get("solved", 0.0) + env.get("turns", 0.0))
        assert c.rewards["rank"] == env["rank"] and c.scored
    assert stats["rank"].count == 6 and stats["rank"].none_count == 0


def train_config(tmp_path, model_dir, **environment):
    rows = tmp_path / "rows.jsonl"
    lines = [json.dumps({"prompt": f"What is {a} * 7?", "answer": str(a * 7)}) for a in range(4)]
    rows.write_text("\n".join(lines))
    return {
        "model": {"name_or_path": str(model_dir)},
        "data": {"path": str(rows), "chat_template": True},
        "rewards": [{"name": "format", "weight": 0.5}],
        "environment": {"name": "judge", "max_turns": 4, **environment},
        "training": {
            "output_dir": str(tmp_path / "out"),
            "max_steps": 2,
            "num_generations": 2,
            "per_device_train_batch_size": 2,
            "max_completion_length": 6,
            "logging_steps": 1,
            "report_to": [],
        },
    }


def test_environment_rewards_are_weighted_and_logged_like_rewards(tmp_path, eos_model_dir):
    config = train_config(tmp_path, eos_model_dir, reward_weights={"solved": 2.0, "rank": 0.0})
    rlvr.train(config, progress=False, host=create_host(plugins=[JudgePlugin()]))
    metrics = rlvr.read_metrics(tmp_path / "out")
    assert len(metrics) == 2
    for m in metrics:
        for name in ("solved", "turns", "rank", "format"):
            assert m[f"rewards/{name}/none_count"] is not None
        assert not any(k.startswith("env/reward/") for k in m)
    samples = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").open()]
    assert samples and any(s["env_rewards"].get("solved") is not None for s in samples)
    for s in samples:
        env = s["env_rewards"]
        expected = 0.5 * s["rewards"]["format"] + 2.0 * env.get("solved", 0.0)
        expected += 1.0 * env.get("turns", 0.0) + 0.0 * env["rank"]  # turns: not listed, 1.0
        assert s["reward"] == pytest.approx(expected)
        assert {k: s["rewards"][k] for k in env} == env
    got = [s["env_rewards"]["solved"] for s in samples if "solved" in s["env_rewards"]]
    step = metrics[0]
    first = [s for s in samples if s["step"] == 1 and "solved" in s["env_rewards"]]
    assert step["rewards/solved/mean"] == pytest.approx(
        sum(s["env_rewards"]["solved"] for s in first) / len(first)
    )
    assert got


def test_reward_weights_are_checked_against_what_the_environment_returns(tmp_path):
    host = create_host(plugins=[JudgePlugin()])
    base = {"model": {"name_or_path": "m"}, "data": {"path": "d.jsonl"}}

    def problems(environment, rewards=()):
        data = base | {"environment": environment, "rewards": list(rewards)}
        with pytest.raises(ConfigError) as info:
            load_config(data, host, require=("model", "algorithm"))
        return dict(info.value.problems)

    found = problems({"name": "judge", "reward_weights": {"solvd": 1.0}})
    assert found["environment.reward_weights.solvd"] == (
        "environment 'judge' returns no reward 'solvd'; did you mean 'solved'? it returns: "
        "solved, turns, rank"
    )
    found = problems({"name": "tools", "reward_weights": {"solved": 1.0}})
    assert (
        "environment 'tools' returns no reward 'solved'; it returns no rewards"
        in (found["environment.reward_weights.solved"])
    )
    found = problems({"name": "judge", "reward_weights": {"rank": float("inf")}})
    assert "not a usable weight for 'rank'" in found["environment.reward_weights"]
    found = problems({"name": "judge"}, [{"name": "format", "label": "turns"}])
    assert "also a rewards[] label" in found["environment.name"]
    ok = load_config(
        base | {"environment": {"name": "judge", "reward_weights": {"rank": 0.5}}},
        host,
        require=("model", "algorithm"),
    )
    assert ok.environment.reward_weights == {"rank": 0.5}
    scoped = load_config(
        base | {"rewards": [{"name": "format", "scope": "transcript"}]}, host, require=("model",)
    )
    assert scoped.rewards[0].scope == "transcript"


def test_a_group_hook_that_misbehaves_fails_its_group(eos_model_dir):
    class Bad(Judge):
        async def group_rewards(self, states, transcripts):
            return [{"rank": float("nan")}] + [{}] * (len(states) - 1)

    model, tok = load_policy(
        ModelConfig(name_or_path=str(eos_model_dir)),
        device=torch.device("cpu"),
        dtype=torch.float32,
    )
    runner = EpisodeRunner(
        environment=Bad(),
        environment_name="bad",
        generator=HFGenerator(HFParams(), RUN, model, tok),
        tokenizer=tok,
        prompts=PromptSet([{"prompt": "hi"}], DataConfig(path="x", chat_template=True), tok, None),
        limits=EpisodeLimits(2, 200, 5.0, 30.0, "hermes"),
        max_turn_tokens=6,
        eos_ids=eos_token_ids(model, tok),
    )
    episodes = runner.run([0], 2, SamplingParams(max_tokens=6, seed=1))
    runner.close()
    assert episodes[0].failed is not None and "rank" in episodes[0].failed
    assert "finite number" in episodes[0].failed
    assert episodes[1].failed is None
    assert asyncio.iscoroutinefunction(Judge.group_rewards)


# --------------------------------------------------------------------------- reasoning_gym

PRODUCTS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}
RG_ENV = {
    "name": "reasoning_gym",
    "params": {"task": "products", "params": PRODUCTS, "train_size": 40, "eval_size": 10},
}


def test_the_reasoning_gym_environment_provides_the_rows_with_a_disjoint_held_out_split():
    pytest.importorskip("reasoning_gym", reason="needs the optional extra rlvr[reasoning-gym]")
    from rlvr.data import reasoning_gym as rg
    from rlvr.data.prompts import load_rows

    host = create_host()
    config = load_config(
        {"model": {"name_or_path": "m"}, "environment": RG_ENV},
        host,
        require=("model", "data", "algorithm"),
    )
    source = config.data.reasoning_gym
    assert source is not None and config.data.path is None
    assert (source.task, source.params, source.train_size) == ("products", PRODUCTS, 40)
    train, test = load_rows(config.data, split="train"), load_rows(config.data, split="test")
    assert len(train) == 40 and len(test) == 10
    assert rg.overlap(train, test) == 0
    # the config as the run saves it (data.reasoning_gym filled in) loads again
    again = load_config(
        config.model_dump(mode="json", exclude_none=True), host, require=("model", "data")
    )
    assert again.data.reasoning_gym == source
    # two sources of rows are one too many
    with pytest.raises(ConfigError) as info:
        other = {"reasoning_gym": {"task": "chain_sum"}}
        load_config(
            {"model": {"name_or_path": "m"}, "data": other, "environment": RG_ENV},
            host,
            require=("model", "data"),
        )
    assert "provides the rows" in dict(info.value.problems)["data.reasoning_gym"]
    with pytest.raises(ConfigError) as info:
        retries = RG_ENV | {"params": RG_ENV["params"] | {"feedback_turns": 2}, "max_turns": 2}
        load_config({"model": {"name_or_path": "m"}, "environment": retries}, host)
    assert "set environment.max_turns: 3" in dict(info.value.problems)["environment.max_turns"]
    # evaluation samples single completions: it says which reward to add
    with pytest.raises(rlvr.RlvrError, match="rewards of environment 'reasoning_gym' are not used"):
        correctness(config, host=host)


def test_the_reasoning_gym_environment_scores_with_the_tasks_score_answer():
    reasoning_gym = pytest.importorskip("reasoning_gym", reason="needs rlvr[reasoning-gym]")
    from rlvr.api.host import build_environment
    from rlvr.data.prompts import load_rows

    host = create_host()
    env_cfg = RG_ENV | {"params": RG_ENV["params"] | {"feedback_turns": 1}}
    config = load_config(
        {"model": {"name_or_path": "m"}, "environment": env_cfg}, host, require=("model", "data")
    )
    env = build_environment(host.environments["reasoning_gym"], config.environment.params, RUN)
    row = next(r for r in load_rows(config.data, split="train") if len(r["answer"]) > 1)
    task = reasoning_gym.create_dataset("products", seed=0, size=1, **PRODUCTS)
    entry = {"question": row["question"], "answer": row["answer"]}
    entry["metadata"] = json.loads(row["metadata"])
    gold = row["answer"]

    async def episode(*answers):
        start = await env.start(row, [{"role": "user", "content": row["prompt"]}])
        out = []
        for a in answers:
            out.append(await env.respond(start.state, {"role": "assistant", "content": a}))
        return out

    (right,) = asyncio.run(episode(f"<answer>{gold}</answer>"))
    assert right.done and right.rewards == {"score_answer": 1.0}
    assert task.score_answer(answer=gold, entry=entry) == 1.0
    partial, wrong = asyncio.run(episode(f"<answer>= {gold}</answer>", "<answer>7</answer>"))
    # partial credit is score_answer's own (len(gold) / len(answer)): not right, so a retry
    assert partial.rewards["score_answer"] == task.score_answer(answer=f"= {gold}", entry=entry)
    assert 0 < partial.rewards["score_answer"] < 1 and not partial.done
    assert partial.messages == [{"role": "user", "content": env.params.feedback}]
    assert wrong.done and wrong.rewards["score_answer"] == task.score_answer("7", entry)
    (none,) = asyncio.run(episode("no answer block"))
    assert none.rewards == {"score_answer": 0.0}


def test_a_reasoning_gym_environment_trains_by_name_without_a_data_file(tmp_path, eos_model_dir):
    pytest.importorskip("reasoning_gym", reason="needs the optional extra rlvr[reasoning-gym]")
    from rlvr.plugins.rewards.params import ReasoningGymParams
    from rlvr.plugins.rewards.reasoning_gym import ReasoningGymReward

    scoring = {"strategies": ["last_number"]}
    params = RG_ENV["params"] | {"feedback_turns": 1, "scoring": scoring}
    config = {
        "model": {"name_or_path": str(eos_model_dir)},
        "environment": {"name": "reasoning_gym", "params": params, "max_turns": 2},
        "training": {
            "output_dir": str(tmp_path / "out"),
            "max_steps": 2,
            "num_generations": 2,
            "per_device_train_batch_size": 2,
            "max_completion_length": 6,
            "logging_steps": 1,
            "report_to": [],
        },
    }
    rlvr.train(config, progress=False)
    metrics = rlvr.read_metrics(tmp_path / "out")
    assert [m["env/episodes"] for m in metrics] == [4, 4]
    assert all("rewards/score_answer/mean" in m for m in metrics)
    samples = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").open()]
    judge = ReasoningGymReward(ReasoningGymParams(**scoring))
    scored = [s for s in samples if "score_answer" in s["env_rewards"]]
    assert scored, "no episode was answered"
    for s in scored:
        row = s["row"]
        value = judge(Sample(completion=s["completion"], row=row))
        assert s["env_rewards"]["score_answer"] == value == s["reward"]
        assert row["task"] == "products" and "metadata" in row


@pytest.mark.parametrize("name", ["reasoning_gym_smollm2.yaml", "reasoning_gym_env_smollm2.yaml"])
def test_the_reasoning_gym_examples_validate_and_name_their_accuracy(name, tiny_model_dir):
    """The two SmolLM2 examples (the data form and the environment form of one task) are valid
    run configs, and `rlvr eval` finds their accuracy reward."""
    pytest.importorskip("reasoning_gym", reason="needs the optional extra rlvr[reasoning-gym]")
    path = Path(__file__).resolve().parents[1] / "examples" / name
    hf = [] if importlib.util.find_spec("vllm") else ["backend.name=hf"]  # the recipe's vllm
    config = load_config(
        path,
        create_host(),
        overrides=[f"model.name_or_path={tiny_model_dir}", *hf],
        require=("model", "data", "rewards", "algorithm", "backend"),
    )
    source = config.data.reasoning_gym
    assert source is not None and (source.task, source.eval_size) == ("basic_arithmetic", 500)
    assert [shot.user for shot in config.data.few_shot] == ["Calculate 1250 + 4800."]
    assert correctness(config).label == "strict"
    if config.environment is not None and config.environment.name == "reasoning_gym":
        assert config.environment.params.feedback_turns == 1


def test_eval_and_training_weight_the_environment_rewards_alike(tmp_path, eos_model_dir):
    """A weight-0 environment reward is logged only, in ``rlvr eval`` as in training: every
    sample's total is the same weighted sum on both paths, and eval reports the environment's
    rewards beside the configured ones."""
    config = train_config(tmp_path, eos_model_dir, reward_weights={"solved": 2.0, "rank": 0.0})
    config["training"]["max_steps"] = 1
    host = create_host(plugins=[JudgePlugin()])
    rlvr.train(config, progress=False, host=host)
    summary = rlvr.evaluate(config, k=2, output=tmp_path / "eval", host=host)

    def total(s):
        env = s["env_rewards"]
        return (
            0.5 * s["rewards"]["format"]
            + 2.0 * env.get("solved", 0.0)
            + env.get("turns", 0.0)
            + 0.0 * env.get("rank", 0.0)
        )

    trained = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").open()]
    evaluated = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").open()]
    for samples in (trained, evaluated):
        scored = [s for s in samples if "failed" not in s]
        assert scored and any(s["env_rewards"].get("rank") == 1.0 for s in scored)
        for s in scored:
            assert s["reward"] == pytest.approx(total(s)), s
            assert {k: s["rewards"][k] for k in s["env_rewards"]} == s["env_rewards"]
    for name in ("format", "solved", "turns", "rank"):
        assert summary[f"rewards/{name}/none_count"] is not None, name
