"""rlvr.training.update: micro-batches sorted by length change no result."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest
import torch

from rlvr.api.runtime import RolloutBatch
from rlvr.config.schema import TrainingConfig
from rlvr.model.loading import load_policy
from rlvr.model.logprobs import completion_logprobs
from rlvr.training.update import PolicyUpdate


class _Algorithm:
    """Token-mean policy gradient ``-sum(A * logp) / num_tokens``: a sum over rows."""

    value_learning_rate = None

    def loss(self, batch, logp, *, values, num_tokens, num_seqs):
        from types import SimpleNamespace

        mask = batch.completion_mask
        loss = -(batch.advantages[:, None] * logp * mask).sum() / num_tokens
        return SimpleNamespace(loss=loss, metrics={})


def _batch(vocab: int, *, groups_share_prompts: bool = False) -> RolloutBatch:
    """Six completions of very different lengths (and prompts of different lengths), in three
    groups of two; with ``groups_share_prompts`` the two rows of a group have one prompt, as
    in training."""
    g = torch.Generator().manual_seed(0)
    prompt_lens, completion_lens = [3, 9, 2, 7, 5, 4], [2, 11, 4, 1, 9, 6]
    if groups_share_prompts:
        prompt_lens = [3, 3, 9, 9, 5, 5]
    n, p, t = 6, max(prompt_lens), max(completion_lens)
    prompt_mask = torch.zeros(n, p, dtype=torch.long)
    completion_mask = torch.zeros(n, t, dtype=torch.long)
    for i, (lp, lc) in enumerate(zip(prompt_lens, completion_lens, strict=True)):
        prompt_mask[i, p - lp :] = 1
        completion_mask[i, :lc] = 1
    prompt_ids = torch.randint(3, vocab, (n, p), generator=g)
    if groups_share_prompts:
        prompt_ids = prompt_ids[torch.arange(n) // 2 * 2]
    return RolloutBatch(
        prompt_ids=prompt_ids * prompt_mask,
        prompt_mask=prompt_mask,
        completion_ids=torch.randint(3, vocab, (n, t), generator=g) * completion_mask,
        completion_mask=completion_mask,
        group_ids=torch.arange(n) // 2,
        scores=torch.zeros(n),
        lengths=completion_mask.sum(1),
        truncated=torch.zeros(n, dtype=torch.bool),
        advantages=torch.randn(n, generator=g),
    )


def _update(model, prompts: int, dtype: torch.dtype = torch.float32) -> PolicyUpdate:
    training = TrainingConfig(
        per_device_train_batch_size=prompts,
        num_generations=2,
        optim="sgd",
        learning_rate=0.1,
        max_grad_norm=1e9,
    )
    return PolicyUpdate(
        policy=model,
        reference=None,
        value_model=None,
        algorithm=_Algorithm(),
        old_logprobs=True,
        training=training,
        device=torch.device("cpu"),
        dtype=dtype,
        total_updates=1,
    )


@pytest.fixture
def tiny(tmp_path):
    from rlvr.config.schema import ModelConfig
    from rlvr.model.tiny import build_tiny_model

    path = build_tiny_model(tmp_path / "model")
    return lambda: load_policy(ModelConfig(name_or_path=str(path)), device="cpu")[0]


@pytest.mark.parametrize("packs", [False, True])
def test_sorted_micro_batches_change_nothing(tiny, packs, monkeypatch):
    """Micro-batches of 2 rows go longest first (whole groups, where the passes pack a group
    behind its prompt); the old log-probs come back in the batch's row order and the update
    equals one pass over the whole batch."""
    from rlvr.model import logprobs

    # A float64 model: the identity is exact, and float32 forward passes of rows padded to
    # other lengths differed by up to 8e-5 relative on a 16-core x86 host (1e-6 on 2 cores).
    # What is left is the float32 of rlvr.functional's math.
    f64 = torch.float64
    batch = _batch(512, groups_share_prompts=packs)
    packed = []
    plan = logprobs.plan_packing
    monkeypatch.setattr(logprobs, "plan_packing", lambda *a: packed.append(plan(*a)) or packed[-1])
    split = _update(tiny().to(f64), prompts=1, dtype=f64)
    whole = _update(tiny().to(f64), prompts=3, dtype=f64)
    assert split.packs and whole.packs  # sdpa, full attention, fusable head
    split.packs = packs
    order = torch.cat(list(split._micro_batches(batch)))
    length = batch.prompt_mask.sum(1) + batch.completion_mask.sum(1)
    assert order.tolist() != list(range(6))
    if packs:  # by the longest row: [0, 1] (5, 14 tokens), [4, 5] (14, 11), [2, 3] (13, 10)
        assert order.tolist() == [0, 1, 4, 5, 2, 3]
    else:
        assert (length[order].diff() <= 0).all()

    filled = split.fill_no_grad(batch)
    with torch.no_grad():
        expected, _ = completion_logprobs(
            split.policy,
            batch.prompt_ids,
            batch.prompt_mask,
            batch.completion_ids,
            batch.completion_mask,
        )
    torch.testing.assert_close(filled.old_logp, expected.float(), rtol=1e-6, atol=1e-6)

    r_split, r_whole = split.update(filled, first=True), whole.update(filled, first=True)
    assert r_split.loss == pytest.approx(r_whole.loss, rel=1e-5)  # 4e-7 here: float32 sums
    assert r_split.grad_norm == pytest.approx(r_whole.grad_norm, rel=1e-5) and r_whole.grad_norm > 0
    for a, b in zip(split.policy.parameters(), whole.policy.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-8)
    assert any(p is not None for p in packed) == packs  # the groups' prompts ran once


class _InertAlgorithm(_Algorithm):
    """The same loss; rows whose advantage is 0 are declared inert (their gradient is 0)."""

    def __init__(self, declare: bool):
        self.declare = declare

    def inert(self, batch):
        return batch.advantages == 0 if self.declare else None


def _adamw_update(model, declare: bool) -> PolicyUpdate:
    model = model.to(torch.float64)  # as above: rows padded to other widths round otherwise
    training = TrainingConfig(
        per_device_train_batch_size=1, num_generations=2, learning_rate=0.01, weight_decay=0.1
    )
    return PolicyUpdate(
        policy=model,
        reference=None,
        value_model=None,
        algorithm=_InertAlgorithm(declare),
        old_logprobs=False,
        training=training,
        device=torch.device("cpu"),
        dtype=torch.float64,
        total_updates=3,
    )


def test_inert_rows_are_skipped_and_change_nothing(tiny):
    """Rows the algorithm declares inert get no pass, and the weights after three AdamW updates
    (some rows inert, then every row inert: AdamW still steps on its moments) equal those of an
    update that runs every row."""
    batch = _batch(512)
    some = batch.advantages.clone()
    some[[1, 4]] = 0.0
    batches = [
        RolloutBatch(**{**batch.__dict__, "advantages": some}),
        RolloutBatch(**{**batch.__dict__, "advantages": torch.zeros(6)}),
        RolloutBatch(**{**batch.__dict__, "advantages": some}),
    ]
    skipping, running = _adamw_update(tiny(), True), _adamw_update(tiny(), False)
    calls = []
    original = skipping._logprobs
    skipping._logprobs = lambda model, mb, **kw: (calls.append(len(mb)), original(model, mb, **kw))[
        1
    ]
    results = [(skipping.update(b, first=True), running.update(b, first=True)) for b in batches]

    assert [r.inert_frac for r, _ in results] == [pytest.approx(2 / 6), 1.0, pytest.approx(2 / 6)]
    assert [r.inert_frac for _, r in results] == [0.0, 0.0, 0.0]
    # The 4 active rows in micro-batches of 2, twice; the all-inert update runs no pass.
    assert calls == [2, 2, 2, 2]
    for skip, run in results:
        assert skip.loss == pytest.approx(run.loss, abs=1e-7)
        assert skip.grad_norm == pytest.approx(run.grad_norm, rel=1e-5, abs=1e-9)
    assert results[1][0].grad_norm == 0.0 and results[1][0].entropy is None
    for a, b in zip(skipping.policy.parameters(), running.policy.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    # The all-inert update still moved the weights (AdamW's moments), as the full update did.
    assert skipping.optimizer.state[next(iter(skipping.optimizer.state))]["step"] == 3
