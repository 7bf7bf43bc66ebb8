"""TRL 1.16's reward-calling convention (issue #36 item 1): batched calls, ``completion_ids``,
``trainer_state``, ``log_extra``/``log_metric``, async functions, and TRL's None rule in the
group baselines; the batched reward protocol of the worker pool underneath."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest
import torch

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))  # tests/ in the reward workers too (they get sys.path)

import bad_rewards as br  # noqa: E402

import rlvr  # noqa: E402
from rlvr import functional as F  # noqa: E402
from rlvr.api.registration import Sample  # noqa: E402
from rlvr.rewards.pool import PoolSpec, RewardPool  # noqa: E402
from rlvr.rewards.score_file import score_file  # noqa: E402

MODULE = "trl_rewards"


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------- the pool


@pytest.fixture(scope="module", params=[0, 2], ids=["in-process", "workers"])
def pool(request):
    specs = [
        PoolSpec("call", br.batch_misbehave, timeout=0.5, fallback=-1.0, batch="call"),
        PoolSpec("group", br.batch_misbehave, timeout=0.5, fallback=-1.0, batch="group"),
        PoolSpec("len", br.length, timeout=0.5, fallback=-1.0),
    ]
    with RewardPool(specs, workers=request.param) as p:
        p.wait_ready()
        yield p


def grouped(*groups: list[str]) -> list[Sample]:
    return [Sample(completion=c, group=g) for g, texts in enumerate(groups) for c in texts]


def test_a_batched_reward_is_called_once_per_batch(pool):
    samples = grouped(["a", "bb", "ccc"], ["dddd", "e"])
    result = pool.score(samples)
    # the value says the size of the batch it was scored in
    assert result.values["call"] == pytest.approx([1.05, 2.05, 3.05, 4.05, 1.05])
    assert result.values["group"] == pytest.approx([1.03, 2.03, 3.03, 4.02, 1.02])
    assert result.values["len"] == [1.0, 2.0, 3.0, 4.0, 1.0]
    assert result.columns["group"]["size"] == [3, 3, 3, 2, 2]
    assert result.metrics["call"]["calls"] == [1.0] and result.metrics["group"]["calls"] == [1, 1]
    assert pool.score(samples, by_group=True).values["call"] == result.values["group"]
    assert result.errors == {"call": 0, "group": 0, "len": 0}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("raise", "ValueError: bad batch"),
        ("short", "returned 2 values for a batch of 3 samples"),
    ],
)
def test_a_failed_batch_gives_each_of_its_samples_the_fallback(pool, bad, message):
    result = pool.score(grouped(["a", bad, "c"], ["dd"]))
    assert result.values["group"] == pytest.approx([-1.0, -1.0, -1.0, 2.01])
    assert result.errors["group"] == 3 and result.errors["call"] == 4
    assert set(result.failures["group"]) == {0, 1, 2}
    assert message in result.failures["group"][0]


def test_one_bad_value_of_a_batch_fails_that_sample_only(pool):
    result = pool.score(grouped(["a", "bad", "c"]))
    assert result.values["call"] == pytest.approx([1.03, -1.0, 1.03])
    assert result.errors["call"] == 1 and "'oops'" in result.failures["call"][1]


def test_a_batch_that_hangs_or_crashes_fails_each_sample_and_costs_one_timeout():
    specs = [PoolSpec("b", br.batch_misbehave, timeout=0.3, fallback=0.0, batch="group")]
    with RewardPool(specs, workers=1) as pool:
        result = pool.score(grouped(["sleep", "x"], ["exit"], ["ok"]))
    assert result.values["b"] == pytest.approx([0.0, 0.0, 0.0, 2.01])
    assert result.timeouts["b"] == 2 and result.errors["b"] == 1
    # one call, one timeout, whatever the batch's size (#45 item 18: it was 2 samples x 0.3 s)
    assert "timed out after 0.3s" in result.failures["b"][0]
    assert "crashed the worker" in result.failures["b"][2]


def in_parent(params):
    """A batched reward that says whether it runs in the process ``params`` names."""
    return lambda samples: [float(os.getpid() == params)] * len(samples)


def test_an_in_process_reward_runs_in_the_calling_process_beside_the_workers():
    specs = [
        PoolSpec("here", in_parent, os.getpid(), batch="call", in_process=True),
        PoolSpec("len", br.length),
    ]
    with RewardPool(specs, workers=1) as pool:
        result = pool.score(grouped(["a", "bb"]))
    assert result.values == {"here": [1.0, 1.0], "len": [1.0, 2.0]}


# --------------------------------------------------------------------------- TRL's None rule


def trl_advantages(rewards: torch.Tensor, g: int, scale: str) -> torch.Tensor:
    """TRL 1.16's sum_then_normalize advantages (grpo_trainer.py), with NaN rewards for the
    completions every reward function left None, and its ``nanstd``."""

    def nanstd(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
        mean = torch.nanmean(x, dim=dim, keepdim=dim is not None)
        var = torch.nanmean((x - mean) ** 2, dim=dim)
        count = torch.sum(~torch.isnan(x), dim=dim)
        return torch.sqrt(var * count / (count - 1))

    mean = torch.nanmean(rewards.view(-1, g), dim=1).repeat_interleave(g)
    if scale == "group":
        std = nanstd(rewards.view(-1, g), dim=1).repeat_interleave(g)
    else:
        std = nanstd(rewards).expand_as(rewards)
    advantages = (rewards - mean) / (std + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0)


def test_unscored_completions_are_out_of_the_baseline_and_get_zero():
    rewards = torch.tensor([1.0, 0.0, 5.0, 3.0, 2.0, 7.0, 2.5, 4.0])
    scored = torch.tensor([True, True, False, True, True, False, True, True])
    ids = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    adv = F.group_advantages(rewards, ids, scale="group", scored=scored, eps=1e-4)
    # by hand, group 0: the scored 1, 0, 3 (mean 4/3, Bessel std sqrt(7/3)); the 5 is out
    std = math.sqrt(7 / 3)
    assert adv[:4].tolist() == pytest.approx(
        [(1 - 4 / 3) / (std + 1e-4), (0 - 4 / 3) / (std + 1e-4), 0.0, (3 - 4 / 3) / (std + 1e-4)]
    )
    assert adv[5] == 0.0
    nan = torch.where(scored, rewards, torch.nan)
    for scale in ("group", "batch"):
        ours = F.group_advantages(rewards, ids, scale=scale, scored=scored, eps=1e-4)
        assert ours.tolist() == pytest.approx(trl_advantages(nan, 4, scale).tolist(), abs=1e-5)
    # a group left with one scored completion has no baseline
    one = torch.tensor([True, False, False, False])
    assert F.group_advantages(rewards[:4], ids[:4], scored=one).tolist() == [0.0] * 4
    rloo = F.rloo_advantages(rewards[:4], ids[:4], scored=scored[:4])
    assert rloo.tolist() == pytest.approx([1 - 1.5, 0 - 2.0, 0.0, 3 - 0.5])  # the others


# --------------------------------------------------------------------------- a real run


ROWS = [
    {"prompt": "What is 1 + 1?", "answer": "2", "level": 1},
    {"prompt": "What is 2 + 3?", "answer": "5", "level": 2},
]


def callable_entry(function: str, out: Path, label: str, **params) -> dict:
    return {
        "name": "callable",
        "label": label,
        "params": {"function": f"{MODULE}:{function}", "kwargs": {"out": str(out)}, **params},
    }


def test_a_training_run_calls_trl_functions_as_trl_would(tiny_model_dir, tmp_path):
    out = tmp_path / "seen.jsonl"
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    run = tmp_path / "run"
    config = {
        "model": {"name_or_path": str(tiny_model_dir)},
        "data": {"path": str(rows), "chat_template": False},  # plain prompts, as TRL
        "rewards": [
            callable_entry("soft_overlong", out, "overlong"),
            callable_entry("len_reward", out, "len", batch="group"),
            callable_entry("at_step", out, "state"),
            callable_entry("judged", out, "judge"),
        ],
        "training": {
            "output_dir": str(run),
            "num_generations": 4,
            "per_device_train_batch_size": 2,
            "max_steps": 2,
            "max_completion_length": 6,
            "log_samples_steps": 1,
            "reward_workers": 1,
            "seed": 3,
        },
    }
    rlvr.train(config, allow_code=True, progress=False)
    samples = lines(run / "samples.jsonl")
    seen = lines(out)
    tokenizer = __import__("transformers").AutoTokenizer.from_pretrained(tiny_model_dir)
    for step in (1, 2):
        mine = [s for s in samples if s["step"] == step]
        assert len(mine) == 8
        texts = [s["completion"] for s in mine]
        # batch: step -> one call on the step's 8 completions, in order, with their token ids
        (overlong,) = [c for c in seen if c["what"] == "overlong" and c["completions"] == texts]
        ids = overlong["ids"]
        assert [len(i) for i in ids] == [s["num_tokens"] for s in mine]
        assert [tokenizer.decode(i, skip_special_tokens=True) for i in ids] == texts
        # batch: group -> one call per prompt's 4 completions, its answers as a column
        groups = [c for c in seen if c["what"] == "len" and c["completions"][0] in texts]
        assert sorted(len(c["completions"]) for c in groups) == [4, 4]
        for call in groups:
            (row,) = {s["row"]["answer"] for s in mine if s["completion"] == call["completions"][0]}
            assert call["answer"] == [row] * 4
        # trainer_state: the optimizer steps done when the step is scored, as TRL's
        states = [c for c in seen if c["what"] == "state" and c["state"]["global_step"] == step - 1]
        assert [c["state"] for c in states] == [{"global_step": step - 1, "max_steps": 2}]
        assert states[0]["epoch"] == (0.0 if step == 1 else 1.0) and states[0]["n"] == 8
        # log_extra: a column of the samples log
        assert [s["extra"]["first_id"] for s in mine] == [i[0] for i in ids]
    calls = [c for c in seen if c["what"] == "async"]
    assert len(calls) == 2 and set(calls[0]["prompts"]) == {r["prompt"] for r in ROWS}
    metrics = lines(run / "metrics.jsonl")
    assert [m["rewards/state/metric/batch_size"] for m in metrics] == [8.0, 8.0]
    assert [m["rewards/judge/mean"] for m in metrics] == [0.25, 0.25]

    # TRL's None rule: completions every reward left None are unscored, out of the
    # baseline, with advantage 0; the others' advantages use only their group's scored ones
    unscored = [s for s in samples if s.get("scored") is False]
    assert unscored and all(s["advantage"] == 0.0 for s in unscored)
    assert all(s["extra"]["first_id"] % 2 == 1 for s in unscored)
    mixed = 0
    for step in (1, 2):
        for group in {s["group"] for s in samples if s["step"] == step}:
            rows_ = [s for s in samples if s["step"] == step and s["group"] == group]
            scored = [s for s in rows_ if s.get("scored", True)]
            if len(scored) < 2:
                assert all(s["advantage"] == 0.0 for s in rows_)
                continue
            mixed += len(scored) < len(rows_)
            r = torch.tensor([s["reward"] for s in scored])
            expected = (r - r.mean()) / (r.std() + 1e-6)
            got = [s["advantage"] for s in scored]
            assert got == pytest.approx(expected.tolist(), abs=1e-4)
    assert mixed  # some group had both kinds
    for m in metrics:  # the logged reward leaves them out too, as TRL's
        rewards = [s["reward"] for s in samples if s["step"] == m["step"] and s.get("scored", True)]
        assert m["reward"] == pytest.approx(sum(rewards) / len(rewards))


def test_rewards_score_calls_a_trl_function_on_the_rows_sharing_a_prompt(tmp_path):
    out = tmp_path / "seen.jsonl"
    data = tmp_path / "samples.jsonl"
    rows = [("p1", "a"), ("p1", "bb"), ("p2", "ccc"), ("p1", "d"), ("p2", "ee")]
    data.write_text(
        "".join(json.dumps({"prompt": p, "completion": c, "answer": "x"}) + "\n" for p, c in rows)
    )
    config = rlvr.load_config(
        {"rewards": [callable_entry("len_reward", out, "len")]},
        rlvr.create_host(),
        require=("rewards",),
        allow_code=True,
    )
    score_file(config, rlvr.create_host(), data, tmp_path / "scored.jsonl", workers=1)
    calls = lines(out)
    assert sorted(c["completions"] for c in calls) == [["a", "bb", "d"], ["ccc", "ee"]]
    scored = lines(tmp_path / "scored.jsonl")
    # open-r1's len_reward is batch-relative: the shortest of its prompt's rows gets 0.5
    assert [r["rewards"]["len"] for r in scored] == [0.0, -0.5, -0.5, 0.0, 0.0]
