"""Tests of rlvr.functional against hand-computed values (docs/algorithms.md).

Expected numbers are derived by hand in the comments next to them, never by re-running the
implementation.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rlvr.functional as F

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


def t(x, dtype=torch.float32):
    return torch.tensor(x, dtype=dtype)


def close(actual, expected, atol=1e-5, rtol=1e-5):
    expected = torch.as_tensor(expected, dtype=torch.float32)
    assert actual.dtype == torch.float32
    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol)


# --------------------------------------------------------------------------------------------
# Shared batch for the group functions: uneven sizes, non-contiguous, unsorted ids.
#   group 10: idx 0,2,5,7 rewards [1,0,0,1]  mean 0.5, dev +-0.5, var (4*0.25)/3 = 1/3
#   group 3 : idx 1,4,8   rewards [2,4,6]    mean 4,   dev [-2,0,2], var 8/2 = 4, std 2
#   group 99: idx 3       reward 5           singleton
#   group 5 : idx 6,9     rewards [3,3]      all equal
REWARDS = [1.0, 2.0, 0.0, 5.0, 4.0, 0.0, 3.0, 1.0, 6.0, 3.0]
GROUPS = [10, 3, 10, 99, 3, 10, 5, 10, 3, 5]
S = math.sqrt(3) / 2  # 0.5 / sqrt(1/3) = 0.8660254


@pytest.mark.parametrize(
    "scale,expected",
    [
        ("none", [0.5, -2, -0.5, 0, 0, -0.5, 0, 0.5, 2, 0]),
        ("group", [S, -1, -S, 0, 0, -S, 0, S, 1, 0]),
    ],
)
def test_group_advantages_uneven_noncontiguous(scale, expected):
    adv = F.group_advantages(t(REWARDS), torch.tensor(GROUPS), scale=scale)
    close(adv, expected)


def test_group_advantages_batch_scale():
    # rewards [0,0,2,4,4]: batch mean 2, squared devs 4+4+0+4+4 = 16, var 16/4 = 4, std 2.
    # group 8 = idx 0,2,4 [0,2,4] dev [-2,0,2]; group 2 = idx 1,3 [0,4] dev [-2,2].
    adv = F.group_advantages(t([0.0, 0, 2, 4, 4]), torch.tensor([8, 2, 8, 2, 8]), scale="batch")
    close(adv, [-1.0, -1.0, 0.0, 1.0, 1.0])
    # rewards [0,1,2]: batch std = sqrt((1+0+1)/2) = 1; group 0 = [0,1] dev +-0.5; idx 2 singleton.
    adv = F.group_advantages(t([0.0, 1, 2]), torch.tensor([0, 0, 1]), scale="batch")
    close(adv, [-0.5, 0.5, 0.0])


def test_group_advantages_edge_cases():
    # all-equal group with eps=0 must not be 0/0 = NaN
    adv = F.group_advantages(t([2.0, 2.0, 1.0, 3.0]), torch.tensor([0, 0, 1, 1]), eps=0.0)
    close(adv, [0.0, 0.0, -1 / math.sqrt(2), 1 / math.sqrt(2)])  # std of [1,3] = sqrt(2)
    # only singletons, any scale: all 0 (batch std of one element is undefined -> still 0)
    for scale in ("group", "batch", "none"):
        close(F.group_advantages(t([4.0]), torch.tensor([7]), scale=scale), [0.0])
        close(F.group_advantages(t([1.0, 2.0]), torch.tensor([0, 1]), scale=scale), [0.0, 0.0])
    # negative and huge ids are just labels
    adv = F.group_advantages(t([1.0, 3.0]), torch.tensor([-5, -5]), scale="none")
    close(adv, [-1.0, 1.0])
    adv = F.group_advantages(t([1.0, 3.0]), torch.tensor([2**40, 2**40]), scale="none")
    close(adv, [-1.0, 1.0])
    assert F.group_advantages(t([]), torch.tensor([], dtype=torch.long)).shape == (0,)
    with pytest.raises(ValueError, match="scale"):
        F.group_advantages(t([1.0]), torch.tensor([0]), scale="std")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        F.group_advantages(t([1.0, 2.0]), torch.tensor([0]))


def test_rloo_advantages():
    # group 10 [1,0,0,1]: 1 - mean(0,0,1) = 2/3, 0 - mean(1,0,1) = -2/3
    # group 3 [2,4,6]: 2 - 5 = -3, 4 - 4 = 0, 6 - 3 = 3; singleton / all-equal groups: 0
    adv = F.rloo_advantages(t(REWARDS), torch.tensor(GROUPS))
    two3 = 2 / 3
    close(adv, [two3, -3, -two3, 0, 0, -two3, 0, two3, 3, 0])


def test_dynamic_sampling_keep():
    keep = F.dynamic_sampling_keep(t(REWARDS), torch.tensor(GROUPS))
    assert keep.dtype == torch.bool
    # groups 10 and 3 differ -> kept; 99 (singleton) and 5 (all 3.0) -> dropped
    assert keep.tolist() == [True, True, True, False, True, True, False, True, True, False]
    # 0.1 three times: all equal even though a float mean of them may not be exactly 0.1
    assert not F.dynamic_sampling_keep(t([0.1, 0.1, 0.1]), torch.tensor([1, 1, 1])).any()


# --------------------------------------------------------------------------------------------
# GAE
#
# row 0: mask [0,1,1,0,1] (left pad + hole), r = [9,0,0,9,1], V = [9,.5,1,9,2], gamma .9, lam .5
#   t=4: delta = 1 + 0 - 2 = -1                           A4 = -1
#   t=2 (next valid is 4): delta = 0 + .9*2 - 1 = .8      A2 = .8 + .45*(-1) = .35
#   t=1: delta = 0 + .9*1 - .5 = .4                       A1 = .4 + .45*.35 = .5575
# row 1: mask [1,1,0,0,0] (right pad), r = [0,1,5,5,5], V = [.5,.25,7,7,7]
#   t=1: delta = 1 - .25 = .75                            A1 = .75
#   t=0: delta = .9*.25 - .5 = -.275                      A0 = -.275 + .45*.75 = .0625
# row 2: empty mask -> zeros
GAE_R = [[9, 0, 0, 9, 1.0], [0, 1, 5, 5, 5], [1, 1, 1, 1, 1]]
GAE_V = [[9, 0.5, 1, 9, 2], [0.5, 0.25, 7, 7, 7], [1, 1, 1, 1, 1]]
GAE_M = [[0, 1, 1, 0, 1], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]]


def test_gae_holes_and_padding():
    adv, ret = F.gae(t(GAE_R), t(GAE_V), t(GAE_M), gamma=0.9, lam=0.5, whiten=False)
    close(adv, [[0, 0.5575, 0.35, 0, -1], [0.0625, 0.75, 0, 0, 0], [0, 0, 0, 0, 0]])
    # returns = A + V on valid tokens
    close(ret, [[0, 1.0575, 1.35, 0, 1.0], [0.5625, 1.0, 0, 0, 0], [0, 0, 0, 0, 0]])


def test_gae_whiten():
    # valid A = [.5575, .35, -1, .0625, .75]: mean .72/5 = .144,
    # squared devs .17098225 + .042436 + 1.308736 + .00664225 + .367236 = 1.8960325,
    # Bessel var 1.8960325/4 = .474008125 -> (A - .144) / sqrt(.474008125 + 1e-8)
    adv, ret = F.gae(t(GAE_R), t(GAE_V), torch.tensor(GAE_M, dtype=torch.bool), gamma=0.9, lam=0.5)
    w = [0.6005963, 0.2992088, -1.6616254, -0.1183763, 0.8801967]
    close(adv, [[0, w[0], w[1], 0, w[2]], [w[3], w[4], 0, 0, 0], [0, 0, 0, 0, 0]])
    close(ret, [[0, 1.0575, 1.35, 0, 1.0], [0.5625, 1.0, 0, 0, 0], [0, 0, 0, 0, 0]])


def test_gae_gamma_lam_one_is_reward_to_go_minus_value():
    # gamma = lam = 1: A_t = sum of future valid rewards - V_t (values telescope away)
    r = t([[0.0, 2.0, 0.0, 1.0]])
    v = t([[0.5, 0.25, 100.0, 3.0]])
    m = t([[1, 1, 0, 1]])
    adv, ret = F.gae(r, v, m, whiten=False)
    close(adv, [[3 - 0.5, 3 - 0.25, 0, 1 - 3.0]])
    close(ret, [[3.0, 3.0, 0, 1.0]])


def test_masked_helpers():
    x = t([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    m = t([[1, 0, 1], [0, 0, 0]])
    close(F.masked_mean(x, m), 2.0)  # (1 + 3) / 2
    close(F.masked_mean(x, m, dim=1), [2.0, 0.0])  # empty row -> 0
    close(F.masked_mean(x, m, dim=0), [1.0, 0.0, 3.0])
    close(F.masked_mean(x, torch.zeros(2, 3)), 0.0)
    # whiten [1, 3] -> mean 2, var 2 -> (+-1)/sqrt(2); single valid entry -> 0, not NaN
    close(F.masked_whiten(x, m), [[-1 / math.sqrt(2), 0, 1 / math.sqrt(2)], [0, 0, 0]])
    close(F.masked_whiten(x, t([[0, 1, 0], [0, 0, 0]])), torch.zeros(2, 3))


# --------------------------------------------------------------------------------------------
# policy loss
#
# old_logp = 0, logp = log(ratio); eps 0.2 -> clip range [0.8, 1.2]
#   (A, r)      l1 = -A r   l2 = -A clip(r)   l = max        clipped?
#   ( 1, 1.5)   -1.5        -1.2              -1.2           high (l2 > l1)
#   ( 1, 0.5)   -0.5        -0.8              -0.5           no
#   (-2, 0.5)    1.0         1.6               1.6           low  (l2 > l1)
#   (-2, 1.5)    3.0         2.4               3.0           no
#   (-1, 4.0)    4.0         1.2               4.0           no (dual clip 3 -> min(4, 3) = 3)
#   ( 1, 1.1)   -1.1        -1.1              -1.1           no
#   (.5, 1.0)   -0.5        -0.5              -0.5           no
#   padding (A = 100, r = e^5): masked -> 0
PL_RATIO = [[1.5, 0.5, 0.5, 1.5], [4.0, 1.1, 1.0, math.exp(5)]]
PL_ADV = [[1.0, 1.0, -2.0, -2.0], [-1.0, 1.0, 0.5, 100.0]]
PL_MASK = [[1, 1, 1, 1], [1, 1, 1, 0]]


def _pl_inputs():
    logp = torch.log(t(PL_RATIO)).requires_grad_()
    return logp, torch.zeros(2, 4), t(PL_ADV), t(PL_MASK)


@pytest.mark.parametrize("dual_clip", [None, 3.0])
def test_policy_loss_values_grads_stats(dual_clip):
    logp, old, adv, mask = _pl_inputs()
    loss, stats = F.policy_loss(logp, old, adv, mask, dual_clip=dual_clip)
    dual = 3.0 if dual_clip else 4.0
    close(loss, [[-1.2, -0.5, 1.6, 3.0], [dual, -1.1, -0.5, 0.0]])
    loss.sum().backward()
    # d l / d logp = -A r where the unclipped branch is active, 0 where a clip is active
    grad_dual = 0.0 if dual_clip else 4.0
    close(logp.grad, [[0.0, -0.5, 0.0, 3.0], [grad_dual, -1.1, -0.5, 0.0]])
    # 7 valid tokens: 2 clipped (1 low, 1 high); approx_kl = -mean(log r)
    close(stats["clip_frac"], 2 / 7)
    close(stats["clip_frac_low"], 1 / 7)
    close(stats["clip_frac_high"], 1 / 7)
    # -(2 log .75 + log 4 + log 1.1 + log 1) / 7 = -0.1294629
    close(stats["approx_kl"], -0.1294629)
    assert all(not s.requires_grad and s.dtype == torch.float32 for s in stats.values())


def test_policy_loss_clip_higher_and_broadcast():
    # eps_low .2, eps_high .28: ratio 1.25 with A = 1 is no longer clipped (-1.25);
    # ratio 0.75 with A = -1 is clipped at 0.8 (l = 0.8). Sequence advantages [N] broadcast.
    logp = torch.log(t([[1.25, 1.3], [0.75, 1.0]]))
    loss, stats = F.policy_loss(
        logp, torch.zeros(2, 2), t([1.0, -1.0]), torch.ones(2, 2), eps_high=0.28
    )
    # (1, 1.3): l1 = -1.3, l2 = -1.28 -> -1.28 ; (-1, 1.0): 1.0
    close(loss, [[-1.25, -1.28], [0.8, 1.0]])
    close(stats["clip_frac"], 2 / 4)
    close(stats["clip_frac_high"], 1 / 4)
    close(stats["clip_frac_low"], 1 / 4)


def test_policy_loss_empty_mask_and_garbage_padding():
    logp = t([[-math.inf, 0.0], [math.nan, -1.0]]).requires_grad_()
    old = t([[math.nan, 0.0], [0.0, math.inf]])
    adv = t([[math.nan, 1.0], [1.0, math.inf]])
    mask = t([[0, 1], [0, 0]])
    loss, stats = F.policy_loss(logp, old, adv, mask)
    close(loss, [[0.0, -1.0], [0.0, 0.0]])
    F.aggregate(loss, mask, "token-mean").backward()
    close(logp.grad, [[0.0, -1.0], [0.0, 0.0]])
    assert all(torch.isfinite(s) for s in stats.values())
    loss, stats = F.policy_loss(logp.detach(), old, adv, torch.zeros(2, 2))
    close(loss, torch.zeros(2, 2))
    for s in stats.values():
        close(s, 0.0)


def test_policy_loss_validation():
    z = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="dual_clip"):
        F.policy_loss(z, z, z, z, dual_clip=1.0)
    with pytest.raises(ValueError, match="advantages"):
        F.policy_loss(z, z, torch.zeros(3), z)


# --------------------------------------------------------------------------------------------
# KL


def test_kl_penalty_kinds():
    # logp - ref = [1, 0, -2]; d = ref - logp = [-1, 0, 2]
    logp, ref = t([0.0, -1.0, -2.0]), t([-1.0, -1.0, 0.0])
    close(F.kl_penalty(logp, ref, "k1"), [1.0, 0.0, -2.0])
    close(F.kl_penalty(logp, ref, "k2"), [0.5, 0.0, 2.0])
    # exp(-1) + 1 - 1 = 0.3678794 ; 0 ; exp(2) - 2 - 1 = 4.3890561
    close(F.kl_penalty(logp, ref, "k3"), [0.3678794, 0.0, 4.3890561])
    # d = 5: exp(5) - 6 = 142.4 -> 10 ; d = -30 -> clamp -20: e^-20 + 19 -> 10
    close(F.kl_penalty(t([0.0, 0.0]), t([5.0, -30.0]), "k3"), [10.0, 10.0])
    with pytest.raises(ValueError, match="kind"):
        F.kl_penalty(logp, ref, "k4")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# aggregation
#
# loss [[1,2,3,4],[5,6,7,8],[9,9,9,9]], mask [[1,1,0,0],[1,1,1,0],[0,0,0,0]]
#   token-mean: (1+2+5+6+7)/5 = 4.2
#   row means 1.5, 6 (row 2 empty, skipped): seq-mean-token-mean = 3.75
#   row sums 3, 18: seq-mean-token-sum = 10.5; / norm_length 10 = 1.05
# with global counts num_tokens = 10, num_seqs = 4:
#   21/10 = 2.1 ; 7.5/4 = 1.875 ; 21/4 = 5.25 ; 5.25/10 = .525
AGG_LOSS = [[1.0, 2, 3, 4], [5, 6, 7, 8], [9, 9, 9, 9]]
AGG_MASK = [[1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]]


@pytest.mark.parametrize(
    "mode,expected,expected_global",
    [
        ("token-mean", 4.2, 2.1),
        ("seq-mean-token-mean", 3.75, 1.875),
        ("seq-mean-token-sum", 10.5, 5.25),
        ("seq-mean-token-sum-norm", 1.05, 0.525),
    ],
)
@pytest.mark.parametrize("mask_dtype", [torch.float32, torch.bool, torch.long])
def test_aggregate_modes(mode, expected, expected_global, mask_dtype):
    loss, mask = t(AGG_LOSS), t(AGG_MASK, dtype=mask_dtype)
    close(F.aggregate(loss, mask, mode, norm_length=10), expected)
    out = F.aggregate(loss, mask, mode, norm_length=10, num_tokens=10, num_seqs=4)
    close(out, expected_global)
    # counts may be tensors too
    out = F.aggregate(
        loss, mask, mode, norm_length=10, num_tokens=torch.tensor(10), num_seqs=torch.tensor(4)
    )
    close(out, expected_global)


@pytest.mark.parametrize("mode", MODES)
def test_aggregate_empty_mask_is_zero_and_differentiable(mode):
    loss = torch.full((2, 3), math.nan).requires_grad_()
    out = F.aggregate(loss, torch.zeros(2, 3), mode, norm_length=4)
    close(out, 0.0)
    out.backward()
    close(loss.grad, torch.zeros(2, 3))


def test_aggregate_errors():
    loss, mask = t(AGG_LOSS), t(AGG_MASK)
    with pytest.raises(ValueError, match="norm_length"):
        F.aggregate(loss, mask, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="mode"):
        F.aggregate(loss, mask, "mean")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape"):
        F.aggregate(loss, mask[:, :2], "token-mean")


@pytest.mark.parametrize("mode", MODES)
def test_gradient_accumulation_equals_full_batch(mode):
    g = torch.Generator().manual_seed(0)
    n, width = 7, 6
    logp0 = -torch.rand(n, width, generator=g) * 2
    old = logp0 + 0.3 * torch.randn(n, width, generator=g)
    ref = logp0 + 0.3 * torch.randn(n, width, generator=g)
    adv = torch.randn(n, generator=g)
    lengths = torch.tensor([6, 0, 3, 1, 5, 0, 2])  # two empty rows, uneven lengths
    mask = torch.arange(width)[None, :] < lengths[:, None]

    def step(logp, sl):
        loss, _ = F.policy_loss(logp[sl], old[sl], adv[sl], mask[sl], eps_high=0.28)
        return loss + 0.04 * F.kl_penalty(logp[sl], ref[sl], "k3")

    full_logp = logp0.clone().requires_grad_()
    full = F.aggregate(step(full_logp, slice(None)), mask, mode, norm_length=8)
    full.backward()

    num_tokens = mask.sum()
    num_seqs = (mask.sum(1) > 0).sum()
    micro_logp = logp0.clone().requires_grad_()
    total = torch.zeros(())
    for sl in (slice(0, 3), slice(3, 5), slice(5, 7)):
        part = F.aggregate(
            step(micro_logp, sl),
            mask[sl],
            mode,
            norm_length=8,
            num_tokens=num_tokens,
            num_seqs=num_seqs,
        )
        part.backward()
        total = total + part.detach()
    torch.testing.assert_close(total, full.detach())
    torch.testing.assert_close(micro_logp.grad, full_logp.grad)
    assert full_logp.grad.abs().sum() > 0


# --------------------------------------------------------------------------------------------
# reward shaping and truncation


def test_overlong_penalty():
    # max 100, buffer 20: <= 80 -> 0 ; 85 -> -5/20 = -.25 ; 90 -> -.5 ; >= 100 -> -1
    lengths = torch.tensor([50, 80, 85, 90, 100, 120])
    pen = F.overlong_penalty(lengths, max_length=100, buffer=20)
    close(pen, [0, 0, -0.25, -0.5, -1, -1])
    pen = F.overlong_penalty(lengths, max_length=100, buffer=20, factor=2.0)
    close(pen, [0, 0, -0.5, -1, -2, -2])
    with pytest.raises(ValueError, match="buffer"):
        F.overlong_penalty(lengths, max_length=100, buffer=0)


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32, torch.long])
def test_truncation_mask(dtype):
    mask = t([[1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=dtype)
    out = F.truncation_mask(mask, torch.tensor([False, True, False]))
    assert out.dtype == dtype
    assert out.tolist() == t([[1, 1, 0], [0, 0, 0], [1, 0, 0]], dtype=dtype).tolist()
    out = F.truncation_mask(mask, torch.tensor([1, 0, 1]))
    assert out.tolist() == t([[0, 0, 0], [1, 1, 1], [0, 0, 0]], dtype=dtype).tolist()


# --------------------------------------------------------------------------------------------
# bf16 in, float32 out


def test_bf16_inputs_give_float32_results():
    g = torch.Generator().manual_seed(1)
    logp = -torch.rand(4, 5, generator=g)
    old = logp + 0.1 * torch.randn(4, 5, generator=g)
    adv = torch.randn(4, 5, generator=g)
    mask = torch.rand(4, 5, generator=g) > 0.3
    rewards = torch.randn(4, generator=g)
    ids = torch.tensor([0, 1, 0, 1])

    def run(dt):
        lp, od, a, r = (x.to(dt) for x in (logp, old, adv, rewards))
        loss, stats = F.policy_loss(lp, od, a, mask, eps_high=0.28)
        adv_g, ret = F.gae(a, od, mask, gamma=0.9, lam=0.95)
        return [
            loss,
            *stats.values(),
            F.aggregate(loss, mask, "seq-mean-token-mean"),
            F.kl_penalty(lp, od, "k3"),
            F.group_advantages(r, ids),
            F.rloo_advantages(r, ids),
            adv_g,
            ret,
            F.masked_mean(a, mask),
        ]

    out_bf16 = run(torch.bfloat16)
    out_f32 = run(torch.float32)
    for a, b in zip(out_bf16, out_f32, strict=True):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, atol=0.05, rtol=0.05)
    # bf16 values are upcast before any math: identical to feeding their float32 copies
    exact = F.policy_loss(logp.bfloat16().float(), old.bfloat16().float(), adv, mask)[0]
    torch.testing.assert_close(
        F.policy_loss(logp.bfloat16(), old.bfloat16(), adv, mask)[0], exact, atol=0, rtol=0
    )


# --------------------------------------------------------------------------------------------
# properties

_f = st.floats


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_policy_loss_grad_is_zero_exactly_where_clipped(data):
    n = data.draw(st.integers(1, 4))
    width = data.draw(st.integers(1, 6))
    size = n * width

    def draw(strategy):
        return data.draw(st.lists(strategy, min_size=size, max_size=size))

    log_ratio = t(draw(_f(-2, 2, width=32))).view(n, width)
    old = t(draw(_f(-5, 0, width=32))).view(n, width)
    adv = t(draw(_f(-3, 3, width=32, allow_subnormal=False))).view(n, width)
    mask = torch.tensor(draw(st.booleans())).view(n, width)
    eps_low = data.draw(_f(0.0, 0.5))
    eps_high = data.draw(_f(0.0, 0.5))
    dual_clip = data.draw(st.none() | _f(1.5, 5.0))

    logp = (old + log_ratio).requires_grad_()
    loss, _ = F.policy_loss(
        logp, old, adv, mask, eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip
    )
    loss.sum().backward()
    grad = logp.grad

    ratio = torch.exp(logp.detach() - old)
    hi, lo = 1 + eps_high, 1 - eps_low
    clipped = ((adv > 0) & (ratio > hi)) | ((adv < 0) & (ratio < lo))
    bounds = [hi, lo]
    if dual_clip is not None:
        clipped |= (adv < 0) & (ratio > dual_clip)
        bounds.append(dual_clip)
    # ratios within float rounding of a clip boundary may go either way
    near = torch.zeros_like(mask)
    for b in bounds:
        near |= (ratio - b).abs() < 1e-4
    zero = ~mask | clipped | (adv == 0)
    assert (grad[zero & ~near] == 0).all()
    assert (grad[mask & ~clipped & ~near & (adv.abs() > 1e-3)] != 0).all()


@settings(max_examples=100, deadline=None)
@given(
    rows=st.integers(1, 5),
    width=st.integers(1, 7),
    data=st.data(),
)
def test_token_mean_weights_every_token_equally(rows, width, data):
    size = rows * width
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=size, max_size=size)))
    mask = mask.view(rows, width)
    vals = data.draw(st.lists(_f(-1e3, 1e3, width=32), min_size=size, max_size=size))
    x = t(vals).view(rows, width).requires_grad_()
    F.aggregate(x, mask, "token-mean").backward()
    expected = mask.float() / mask.sum().clamp(min=1)
    torch.testing.assert_close(x.grad, expected)


# --------------------------------------------------------------------------------------------
# GSPO (policy_loss level="sequence")
#   seq 0: mask [1, 1, 0], d = logp - old = [0.1, 0.3], log s = 0.2, s = e^0.2 = 1.2214028, A = 1
#          clip(s, 0.8, 1.2) = 1.2: l1 = -1.2214, l2 = -1.2 -> loss -1.2 per token, clipped, grad 0
#   seq 1: mask [1, 1, 1], d = [0, -0.3, 0], log s = -0.1, s = e^-0.1 = 0.9048374, A = -2
#          not clipped: loss 2 * 0.9048374 = 1.8096748 per token; d loss_t / d logp_t = -A * s


def _gspo_inputs():
    old = t([[-1.0, -2.0, -1.0], [-0.5, -1.0, -1.5]])
    logp = old + t([[0.1, 0.3, 5.0], [0.0, -0.3, 0.0]])  # 5.0 is padding: must not count
    mask = t([[1, 1, 0], [1, 1, 1]])
    return logp.requires_grad_(), old, t([1.0, -2.0]), mask


def test_gspo_sequence_ratio_values_grads_stats():
    logp, old, adv, mask = _gspo_inputs()
    loss, stats = F.policy_loss(logp, old, adv, mask, level="sequence")
    s0, s1 = math.exp(0.2), math.exp(-0.1)
    close(loss, [[-1.2, -1.2, 0.0], [2 * s1, 2 * s1, 2 * s1]])
    loss.sum().backward()
    close(logp.grad, [[0.0, 0.0, 0.0], [2 * s1, 2 * s1, 2 * s1]])
    close(stats["clip_frac"], 2 / 5)
    close(stats["approx_kl"], -(0.1 + 0.3 - 0.3) / 5)
    close(stats["seq_ratio_mean"], (s0 + s1) / 2)
    close(stats["seq_ratio_min"], s1)
    close(stats["seq_ratio_max"], s0)


def test_gspo_differs_from_token_level_and_matches_it_for_one_token():
    logp, old, adv, mask = _gspo_inputs()
    token, _ = F.policy_loss(logp, old, adv, mask)
    sequence, _ = F.policy_loss(logp, old, adv, mask, level="sequence")
    assert not torch.allclose(token[1], sequence[1])  # token ratios e^0, e^-0.3, e^0 differ
    # With one token per sequence the geometric mean is the token ratio itself.
    one = t([[1, 0, 0], [1, 0, 0]])
    a, _ = F.policy_loss(logp, old, adv, one)
    b, _ = F.policy_loss(logp, old, adv, one, level="sequence")
    close(a, b.detach())


def test_gspo_log_ratio_clamp_at_10_has_zero_gradient():
    # log s = 12 clamps to 10; A = -1, so the unclipped branch -A * e^10 is the loss.
    logp = t([[2.0, 2.0]]).requires_grad_()
    old = t([[-10.0, -10.0]])
    loss, stats = F.policy_loss(logp, old, t([-1.0]), t([[1, 1]]), level="sequence")
    close(loss, [[math.exp(10), math.exp(10)]], rtol=1e-5)
    loss.sum().backward()
    close(logp.grad, [[0.0, 0.0]])
    close(stats["approx_kl"], -12.0)  # the unclamped log-ratio


def test_gspo_rejects_dual_clip_and_bad_level():
    logp, old, adv, mask = _gspo_inputs()
    with pytest.raises(ValueError, match="dual_clip is not defined for level='sequence'"):
        F.policy_loss(logp, old, adv, mask, level="sequence", dual_clip=3.0)
    with pytest.raises(ValueError, match="level must be"):
        F.policy_loss(logp, old, adv, mask, level="seq")


def test_gspo_empty_rows_and_garbage_padding():
    logp = t([[-1.0, float("nan")], [float("-inf"), float("inf")]]).requires_grad_()
    old = t([[-1.2, float("inf")], [float("nan"), 0.0]])
    loss, stats = F.policy_loss(logp, old, t([1.0, 1.0]), t([[1, 0], [0, 0]]), level="sequence")
    assert torch.isfinite(loss).all() and float(loss[1].detach().abs().sum()) == 0.0
    loss.sum().backward()
    assert torch.isfinite(logp.grad).all()
    close(stats["seq_ratio_min"], math.exp(0.2))


# --------------------------------------------------------------------------------------------
# CISPO: d = [0.5, -0.5, 0.1], ratio = [1.6487213, 0.6065307, 1.1051709], A = 1,
#   eps 0.2 / 0.28 -> weight [1.28, 0.8, 1.1051709]; logp = [-1, -2, -0.5]
#   loss = -w * A * logp = [1.28, 1.6, 0.5525855]; d loss / d logp = -w * A (never 0)


def test_cispo_values_grads_stats():
    old = t([[-1.5, -1.5, -0.6]])
    logp = (old + t([[0.5, -0.5, 0.1]])).requires_grad_()
    mask = t([[1, 1, 1]])
    loss, stats = F.cispo_loss(logp, old, t([1.0]), mask, eps_low=0.2, eps_high=0.28)
    close(loss, [[1.28, 1.6, 0.5 * math.exp(0.1)]])
    loss.sum().backward()
    close(logp.grad, [[-1.28, -0.8, -math.exp(0.1)]])
    close(stats["clip_frac"], 2 / 3)
    close(stats["clip_frac_low"], 1 / 3)
    close(stats["clip_frac_high"], 1 / 3)
    close(stats["approx_kl"], -0.1 / 3)
    # PPO's clip drops the first token (ratio 1.65 > 1.28 with A > 0): zero gradient there.
    ppo_logp = logp.detach().clone().requires_grad_()
    ppo, _ = F.policy_loss(ppo_logp, old, t([1.0]), mask, eps_low=0.2, eps_high=0.28)
    ppo.sum().backward()
    assert float(ppo_logp.grad[0, 0]) == 0.0 and float(logp.grad[0, 0]) != 0.0


def test_cispo_trl_absolute_cap_is_eps_high_cap_minus_one():
    # TRL: weight = min(ratio, epsilon_high) with epsilon_high = 5 an absolute cap, no floor.
    old = t([[-3.0, -1.0]])
    logp = old + t([[2.0, -3.0]])  # ratios e^2 = 7.39 (capped at 5) and e^-3 = 0.0498 (kept)
    loss, stats = F.cispo_loss(logp, old, t([-1.0]), t([[1, 1]]), eps_low=1.0, eps_high=4.0)
    close(loss, [[5.0 * -1.0, math.exp(-3.0) * -4.0]])
    close(stats["clip_frac"], 0.5)


def test_cispo_masks_padding_and_validates():
    logp = t([[-1.0, float("nan")]]).requires_grad_()
    old = t([[-1.0, float("-inf")]])
    loss, _ = F.cispo_loss(logp, old, t([2.0]), t([[1, 0]]), eps_low=0.2, eps_high=0.2)
    close(loss, [[2.0, 0.0]])
    loss.sum().backward()
    close(logp.grad, [[-2.0, 0.0]])
    with pytest.raises(ValueError, match="eps_low/eps_high"):
        F.cispo_loss(logp, old, t([2.0]), t([[1, 0]]), eps_low=-0.1, eps_high=0.2)


# --------------------------------------------------------------------------------------------
# REINFORCE++


def test_reinforce_pp_returns_skip_holes_then_whiten():
    # row 0: rewards [0, x, 1], mask [1, 0, 1] (hole), gamma 0.5: G2 = 1, G0 = 0 + 0.5 * 1 = 0.5
    # row 1: rewards [0.2, -1, pad]:                              G1 = -1, G0 = 0.2 - 0.5 = -0.3
    # valid returns [0.5, 1, -0.3, -1]: mean 0.05, squared deviations sum 2.33, var 2.33 / 3
    rewards = t([[0.0, 7.0, 1.0], [0.2, -1.0, 9.0]])
    mask = t([[1, 0, 1], [1, 1, 0]])
    adv = F.reinforce_pp_advantages(rewards, mask, gamma=0.5)
    scale = 1 / math.sqrt(2.33 / 3 + 1e-8)
    expected = [[0.45 * scale, 0.0, 0.95 * scale], [-0.35 * scale, -1.05 * scale, 0.0]]
    close(adv, expected)


def test_reinforce_pp_gamma_one_is_reward_to_go():
    rewards = t([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    mask = t([[1, 1, 1], [1, 1, 0]])
    # returns [1, 1, 1] and [1, 1]: all equal, so whitening gives 0 everywhere
    close(F.reinforce_pp_advantages(rewards, mask), torch.zeros(2, 3))


def test_reinforce_pp_baseline():
    # rewards [1, 0, 0.5, 2], groups [0, 0, 0, 1] (group 1 is a singleton -> 0),
    # lengths [2, 1, 3, 2]. Group 0 mean 0.5 -> [0.5, -0.5, 0, 0] on each row's tokens.
    # 8 valid tokens: sum 0.5, mean 0.0625; squared deviations 2*0.4375^2 + 0.5625^2 +
    # 5*0.0625^2 = 0.71875, var 0.71875 / 7.
    mask = t([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]])
    adv = F.reinforce_pp_baseline_advantages(t([1.0, 0.0, 0.5, 2.0]), t([0, 0, 0, 1]), mask)
    s = 1 / math.sqrt(0.71875 / 7 + 1e-8)
    a, b, c = 0.4375 * s, -0.5625 * s, -0.0625 * s
    close(adv, [[a, a, 0.0], [b, 0.0, 0.0], [c, c, c], [c, c, 0.0]])
    with pytest.raises(ValueError, match="mask must be"):
        F.reinforce_pp_baseline_advantages(t([1.0, 0.0]), t([0, 0]), mask)


# --------------------------------------------------------------------------------------------
# VAPO pieces


def test_length_adaptive_lam():
    # alpha * L = [0, 0.5, 1, 5, 50] -> 1 - 1/x = [-inf, -1, 0, 0.8, 0.98], clamped to [0, 1]
    lam = F.length_adaptive_lam(t([0, 10, 20, 100, 1000], torch.long), alpha=0.05)
    close(lam, [0.0, 0.0, 0.0, 0.8, 0.98])
    with pytest.raises(ValueError, match="alpha"):
        F.length_adaptive_lam(t([1.0]), alpha=0.0)


def test_gae_with_a_lambda_per_sequence():
    # rewards [0, 1], values [0.5, 0.2], gamma 1: delta = [0 + 0.2 - 0.5, 1 - 0.2] = [-0.3, 0.8]
    # lam 0: A = delta = [-0.3, 0.8]; lam 1: A = [-0.3 + 0.8, 0.8] = [0.5, 0.8]; R = A + V
    rewards = t([[0.0, 1.0], [0.0, 1.0]])
    values = t([[0.5, 0.2], [0.5, 0.2]])
    mask = t([[1, 1], [1, 1]])
    adv, ret = F.gae(rewards, values, mask, lam=t([0.0, 1.0]), whiten=False)
    close(adv, [[-0.3, 0.8], [0.5, 0.8]])
    close(ret, [[0.2, 1.0], [1.0, 1.0]])
    with pytest.raises(ValueError, match="lam must be"):
        F.gae(rewards, values, mask, lam=t([0.5]))


def test_positive_nll():
    # positive rows 0 and 2: tokens -1, -2 (row 0) and -3 (row 2) -> mean NLL 6 / 3 = 2
    logp = t([[-1.0, -2.0, float("nan")], [-0.5, -0.5, -0.5], [-3.0, 0.0, 0.0]])
    logp.requires_grad_()
    mask = t([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    out = F.positive_nll(logp, mask, t([True, False, True], torch.bool))
    close(out, 2.0)
    out.backward()
    close(logp.grad, [[-1 / 3, -1 / 3, 0.0], [0.0, 0.0, 0.0], [-1 / 3, 0.0, 0.0]])
    # split in two micro-batches with the step's positive-token count: same total
    pos = t([1, 0, 1])
    parts = [F.positive_nll(logp[r], mask[r], pos[r], num_tokens=3) for r in (slice(0, 2), [2])]
    close(sum(parts), 2.0)
    none = F.positive_nll(logp, mask, t([0, 0, 0]))
    close(none, 0.0)
    assert none.requires_grad


def test_explained_variance():
    ret = t([[1.0, 2.0, 3.0, 99.0]])
    mask = t([[1, 1, 1, 0]])
    close(F.explained_variance(ret, ret, mask), 1.0)
    close(F.explained_variance(t([[2.0, 2.0, 2.0, 0.0]]), ret, mask), 0.0)
    # residual [0, 0, -1]: variance 2/9 against 2/3 -> 1 - 1/3
    close(F.explained_variance(t([[1.0, 2.0, 4.0, 0.0]]), ret, mask), 2 / 3)
    close(F.explained_variance(ret, t([[5.0, 5.0, 5.0, 0.0]]), mask), 0.0)  # nothing to explain
    rounded = t([[0.0, 1e-6, 0.0, 0.0]])  # returns = A + V rounding noise, variance 3.3e-13
    close(F.explained_variance(t([[0.3, 0.2, 0.1, 0.0]]), rounded, mask), 0.0)
