"""rlvr.functional: truncated importance weights and the log-prob gap, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.functional import logprob_gap_stats, truncated_importance_weights


def test_weights_hand_computed():
    # ratios: exp(0)=1, exp(ln 1.5)=1.5, exp(ln 3)=3 -> capped at 2, exp(ln 0.25)=0.25
    logp_sampler = torch.tensor([[-1.0, -2.0, -3.0, -0.5]])
    logp_train = logp_sampler + torch.tensor([[0.0, math.log(1.5), math.log(3.0), math.log(0.25)]])
    mask = torch.tensor([[1, 1, 1, 1]])
    w = truncated_importance_weights(logp_train, logp_sampler, mask, cap=2.0)
    assert w.dtype == torch.float32
    torch.testing.assert_close(w, torch.tensor([[1.0, 1.5, 2.0, 0.25]]))


def test_weights_zero_outside_mask_even_for_nonfinite_padding():
    logp_train = torch.tensor([[-0.1, 0.0, float("nan")], [-0.2, -0.3, 0.0]])
    logp_sampler = torch.tensor([[-0.1, float("-inf"), 0.0], [-0.7, -0.3, 5.0]])
    mask = torch.tensor([[True, False, False], [True, True, False]])
    w = truncated_importance_weights(logp_train, logp_sampler, mask, cap=10.0)
    expected = torch.tensor([[1.0, 0.0, 0.0], [math.exp(0.5), 1.0, 0.0]])
    torch.testing.assert_close(w, expected)
    assert torch.isfinite(w).all()


def test_weights_huge_gap_is_capped_without_inf():
    logp_train = torch.tensor([[0.0]])
    logp_sampler = torch.tensor([[-1000.0]])
    w = truncated_importance_weights(logp_train, logp_sampler, torch.ones(1, 1), cap=2.0)
    assert w.item() == 2.0


def test_weights_are_detached():
    logp_train = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    logp_sampler = torch.tensor([[-1.5, -2.0]])
    w = truncated_importance_weights(logp_train, logp_sampler, torch.ones(1, 2), cap=2.0)
    assert not w.requires_grad
    # used as a constant factor in a loss, the gradient is w * dlogp
    (w * logp_train).sum().backward()
    torch.testing.assert_close(logp_train.grad, torch.tensor([[math.exp(0.5), 1.0]]))


def test_weights_validate_inputs():
    a = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="cap"):
        truncated_importance_weights(a, a, torch.ones(2, 3), cap=0.0)
    with pytest.raises(ValueError, match="same shape"):
        truncated_importance_weights(a, torch.zeros(2, 4), torch.ones(2, 3), cap=2.0)


def test_gap_stats_hand_computed():
    logp_train = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.25, 9.0]])
    logp_sampler = torch.tensor([[-1.5, -2.0, -2.0], [-0.25, -0.25, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    # |diffs| on the mask: 0.5, 0, 1, 0.25, 0 -> mean 1.75 / 5 = 0.35, max 1.0 (9.0 is padding)
    stats = logprob_gap_stats(logp_train, logp_sampler, mask)
    assert stats == pytest.approx({"mean": 0.35, "max": 1.0})


def test_gap_stats_empty_mask():
    a = torch.zeros(2, 2)
    assert logprob_gap_stats(a, a + 1, torch.zeros(2, 2)) == {"mean": 0.0, "max": 0.0}
