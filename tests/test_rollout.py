"""Rollout pieces shared by training and ``rlvr eval``: batches built from completions."""

from __future__ import annotations

import math

import torch

from rlvr.rollout.batch import build_batch
from rlvr.rollout.completions import Completion
from rlvr.rollout.runner import step_seed


def completion(group: int, prompt: list[int], tokens: list[int], **kw) -> Completion:
    return Completion(
        prompt_index=group, group=group, prompt_ids=prompt, token_ids=tokens, text="", **kw
    )


def test_build_batch_pads_and_carries_the_step():
    items = [
        completion(0, [5, 6, 7], [1, 2], score=1.0, rewards={"a": 1.0}, truncated=False),
        completion(0, [5, 6, 7], [3], score=0.0, rewards={"a": None}, truncated=False),
        completion(1, [8], [4, 4, 4], score=0.5, rewards={"a": 0.5}, truncated=True),
    ]
    batch = build_batch(items, ["a"], pad_id=0, step=7)
    assert batch.prompt_ids.tolist() == [[5, 6, 7], [5, 6, 7], [0, 0, 8]]  # left-padded
    assert batch.prompt_mask.tolist() == [[1, 1, 1], [1, 1, 1], [0, 0, 1]]
    assert batch.completion_ids.tolist() == [[1, 2, 0], [3, 0, 0], [4, 4, 4]]  # right-padded
    assert batch.completion_mask.sum(1).tolist() == [2, 1, 3]
    assert batch.group_ids.tolist() == [0, 0, 1] and batch.truncated.tolist() == [0, 0, 1]
    a = batch.reward_components["a"].tolist()
    assert a[0] == 1.0 and math.isnan(a[1]) and a[2] == 0.5  # None -> NaN
    assert batch.sampler_logp is None  # only when every completion has them
    # The step survives selection and moves: algorithms with schedules read it in loss().
    part = batch.index(torch.tensor([2]))
    assert part.step == 7 and part.completion_ids.tolist() == [[4, 4, 4]]
    assert batch.to("cpu").step == 7


def test_step_seeds_are_fixed_by_seed_step_and_round():
    assert step_seed(0, 1, 0) == step_seed(0, 1, 0)
    triples = [(0, 1, 0), (0, 2, 0), (0, 1, 1), (1, 1, 0)]
    assert len({step_seed(*t) for t in triples}) == 4
    assert 0 <= step_seed(2**40, 3, 2) < 2**31
