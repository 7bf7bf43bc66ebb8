"""Pure tensor math of rlvr: advantages, policy loss, KL, aggregation, reward shaping.

This module is public API (third-party algorithm plugins import it) and implements exactly the
contract in ``docs/algorithms.md``. Every function is device- and dtype-agnostic: inputs may be
float32 or bfloat16 (or integer where that makes sense), and all math runs and returns in
float32 so that bf16 training does not silently change losses or advantages.

A ``mask`` may have any dtype (bool, int, float); a nonzero entry marks a token that counts.
Values at masked-out positions are never read into a result, so padding may hold anything,
including ``inf``/``nan``, without poisoning results or gradients.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Literal

import torch
from torch import Tensor

# --------------------------------------------------------------------------- sampler correction
# A backend with its own kernels (vLLM) samples from pi_sampler, slightly different from the
# trainer's pi_train. The gap is measured every step; truncated importance sampling (TIS, Yao et
# al. 2025) weights each token's loss by min(pi_train / pi_sampler, cap) to correct for it.


def truncated_importance_weights(
    logp_train: torch.Tensor,
    logp_sampler: torch.Tensor,
    mask: torch.Tensor,
    cap: float,
) -> torch.Tensor:
    """Per-token weights ``min(exp(logp_train - logp_sampler), cap)``, detached, 0 off ``mask``.

    All three tensors are ``[N, T]`` (``mask`` is 1/True on real completion tokens). Returns a
    float32 ``[N, T]`` tensor without grad. Padding positions (mask 0) are 0 whatever values the
    log-probabilities hold there (even inf/nan).
    """
    if cap <= 0:
        raise ValueError(f"cap must be > 0 (got {cap})")
    if logp_train.shape != logp_sampler.shape or logp_train.shape != mask.shape:
        raise ValueError(
            "logp_train, logp_sampler and mask must have the same shape (got "
            f"{tuple(logp_train.shape)}, {tuple(logp_sampler.shape)}, {tuple(mask.shape)})"
        )
    valid = mask.bool()
    diff = logp_train.detach().float() - logp_sampler.detach().float().to(logp_train.device)
    diff = torch.where(valid, diff, torch.zeros_like(diff))
    # Clamp the log-ratio before exp, so no inf ever appears (exp of a huge gap).
    weights = torch.exp(diff.clamp(max=math.log(cap))).clamp(max=cap)
    return torch.where(valid, weights, torch.zeros_like(weights))


def logprob_gap_stats(
    logp_train: torch.Tensor, logp_sampler: torch.Tensor, mask: torch.Tensor
) -> dict[str, float]:
    """``{"mean": , "max": }`` of ``|logp_train - logp_sampler|`` over the tokens of ``mask``.

    Both 0.0 when the mask is empty. Log them as e.g. ``sampler/logp_gap_mean`` and
    ``sampler/logp_gap_max``.
    """
    if logp_train.shape != logp_sampler.shape or logp_train.shape != mask.shape:
        raise ValueError(
            "logp_train, logp_sampler and mask must have the same shape (got "
            f"{tuple(logp_train.shape)}, {tuple(logp_sampler.shape)}, {tuple(mask.shape)})"
        )
    valid = mask.bool()
    if not bool(valid.any()):
        return {"mean": 0.0, "max": 0.0}
    diff = logp_train.detach().float() - logp_sampler.detach().float().to(logp_train.device)
    gap = diff[valid].abs()
    return {"mean": float(gap.mean()), "max": float(gap.max())}


__all__ = [
    "logprob_gap_stats",
    "truncated_importance_weights",
    "AdvantageScale",
    "AggregationMode",
    "KLKind",
    "PolicyLevel",
    "aggregate",
    "cispo_loss",
    "dynamic_sampling_keep",
    "explained_variance",
    "gae",
    "length_adaptive_lam",
    "group_advantages",
    "batch_reducer",
    "batch_sum",
    "kl_penalty",
    "masked_mean",
    "masked_whiten",
    "overlong_penalty",
    "policy_loss",
    "positive_nll",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "rloo_advantages",
    "truncation_mask",
]

AdvantageScale = Literal["group", "batch", "none"]
KLKind = Literal["k1", "k2", "k3"]
AggregationMode = Literal[
    "token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"
]

PolicyLevel = Literal["token", "sequence"]

_SCALES = ("group", "batch", "none")
_KL_KINDS = ("k1", "k2", "k3")
_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


# --------------------------------------------------------------------------------------------
# helpers


def _f32(x: Tensor) -> Tensor:
    """Upcast to float32: bf16 sums over thousands of tokens lose too many bits."""
    return torch.as_tensor(x).to(torch.float32)


def _bool(mask: Tensor) -> Tensor:
    mask = torch.as_tensor(mask)
    return mask if mask.dtype == torch.bool else mask != 0


def _safe_denominator(count: Tensor | float, like: Tensor) -> Tensor:
    """``count`` as float32 with 0 replaced by 1; the numerator is then 0 too, giving 0 not NaN.

    Substituting the denominator (instead of ``where``-ing the result) keeps the backward pass
    free of ``0/0`` as well.
    """
    c = torch.as_tensor(count, dtype=torch.float32, device=like.device)
    return torch.where(c > 0, c, torch.ones_like(c))


# --------------------------------------------------------------------------------------------
# batch statistics under data parallelism


def _identity(x: Tensor) -> Tensor:
    return x


_batch_sum: Callable[[Tensor], Tensor] = _identity


def batch_sum(x: Tensor) -> Tensor:
    """``x`` (a sum over this process's part of the step's batch) summed over the whole batch.

    The identity in one process; under data parallelism (:mod:`rlvr.distributed`) an all-reduce
    over ranks, so batch-level statistics (``scale="batch"``, whitening) equal those of one
    process holding the whole batch. Every rank must reach the same calls in the same order.
    """
    return _batch_sum(x)


@contextlib.contextmanager
def batch_reducer(reduce: Callable[[Tensor], Tensor]) -> Iterator[None]:
    """Route :func:`batch_sum` through ``reduce`` (a sum over ranks) inside the block."""
    global _batch_sum
    before, _batch_sum = _batch_sum, reduce
    try:
        yield
    finally:
        _batch_sum = before


def _check_same_shape(**tensors: Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"shape mismatch: {shapes}")


def _groups(group_ids: Tensor, rewards: Tensor) -> tuple[Tensor, Tensor]:
    """Map arbitrary (non-contiguous, unsorted) ids to ``0..G-1``; return (index[N], sizes[G])."""
    ids = torch.as_tensor(group_ids, device=rewards.device)
    if rewards.dim() != 1 or ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_ids must both be 1-D of the same length, got "
            f"{tuple(rewards.shape)} and {tuple(ids.shape)}"
        )
    _, index, sizes = torch.unique(ids, return_inverse=True, return_counts=True)
    return index, sizes


def _group_sum(x: Tensor, index: Tensor, num_groups: int) -> Tensor:
    return torch.zeros(num_groups, dtype=x.dtype, device=x.device).index_add(0, index, x)


# --------------------------------------------------------------------------------------------
# masked statistics


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is nonzero (along ``dim``, or all).

    Returns 0 (not NaN) where nothing is selected, so empty rows/batches are harmless.
    ``x`` and ``mask`` must be broadcastable.
    """
    x = _f32(x)
    m = _bool(mask).to(x.device)
    shape = torch.broadcast_shapes(x.shape, m.shape)
    m = m.expand(shape)
    xm = torch.where(m, x.expand(shape), torch.zeros((), dtype=x.dtype, device=x.device))
    if dim is None:
        total, count = xm.sum(), m.sum()
    else:
        total, count = xm.sum(dim), m.sum(dim)
    return total / count.to(torch.float32).clamp(min=1)


def masked_whiten(x: Tensor, mask: Tensor, *, eps: float = 1e-8) -> Tensor:
    """Shift/scale ``x`` to mean 0, variance 1 over the masked positions; others become 0.

    Uses the Bessel-corrected masked variance and ``(x - mean) * rsqrt(var + eps)`` as in
    docs/algorithms.md; the mean and variance are of the whole step's batch (:func:`batch_sum`).
    With fewer than two valid entries the variance is taken as 0 (every valid entry equals the
    mean, so the result is 0 rather than NaN).
    """
    x = _f32(x)
    m = _bool(mask).to(x.device)
    _check_same_shape(x=x, mask=m)
    sums = batch_sum(torch.stack([m.sum().to(torch.float32), torch.where(m, x, 0.0).sum()]))
    count = sums[0]
    mean = sums[1] / count.clamp(min=1)
    dev = torch.where(m, x - mean, 0.0)
    var = batch_sum((dev * dev).sum()) / (count - 1).clamp(min=1)
    return dev * torch.rsqrt(var + eps)


# --------------------------------------------------------------------------------------------
# advantages


def group_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    *,
    scale: AdvantageScale = "group",
    eps: float = 1e-6,
) -> Tensor:
    """GRPO advantages ``R_i - mean_g(R)``, optionally divided by a std (``[N]`` float32).

    ``scale="group"`` divides by the group's std + eps (GRPO), ``"batch"`` by the std of all
    ``N`` raw rewards of the step + eps (:func:`batch_sum`), ``"none"`` not at all (Dr. GRPO,
    which argues the std division biases towards too-easy/too-hard prompts). Stds are
    Bessel-corrected. Groups may have any sizes and arbitrary ids; a group of size 1 has no
    baseline and gets 0.
    """
    if scale not in _SCALES:
        raise ValueError(f"scale must be one of {_SCALES}, got {scale!r}")
    r = _f32(rewards)
    index, sizes = _groups(group_ids, r)
    n = sizes.to(torch.float32)
    mean = _group_sum(r, index, len(sizes)) / n
    adv = r - mean[index]
    if scale == "group":
        var = _group_sum(adv * adv, index, len(sizes)) / (n - 1).clamp(min=1)
        adv = adv / _safe_denominator(var.sqrt()[index] + eps, r)
    elif scale == "batch":
        sums = batch_sum(torch.stack([r.new_tensor(float(r.numel())), r.sum()]))
        count, total_mean = sums[0], sums[1] / sums[0].clamp(min=1)
        var = batch_sum(((r - total_mean) ** 2).sum()) / (count - 1).clamp(min=1)
        adv = adv / _safe_denominator(var.sqrt() + eps, r)
    return torch.where((sizes > 1)[index], adv, 0.0)


def rloo_advantages(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Leave-one-out advantages ``R_i - mean_{j in g, j != i} R_j`` (``[N]`` float32).

    Computed as ``G/(G-1) * (R_i - mean_g)``; the baseline excludes the sample itself, which
    keeps the estimator unbiased. Size-1 groups have no baseline and get 0.
    """
    r = _f32(rewards)
    index, sizes = _groups(group_ids, r)
    n = sizes.to(torch.float32)
    mean = _group_sum(r, index, len(sizes)) / n
    factor = (n / (n - 1).clamp(min=1))[index]
    return torch.where((sizes > 1)[index], factor * (r - mean[index]), 0.0)


def gae(
    token_rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    *,
    gamma: float = 1.0,
    lam: float | Tensor = 1.0,
    whiten: bool = True,
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over valid tokens; returns ``(advantages, returns)``.

    ``lam`` is one float or an ``[N]`` tensor, one lambda per sequence (VAPO's length-adaptive
    GAE, see :func:`length_adaptive_lam`).

    The recursion skips masked-out positions: ``t+1`` is the next *valid* token, so left/right
    padding and holes in the mask (e.g. tool output inside a completion) do not break the
    bootstrap chain. ``V`` and ``A`` after the last valid token are 0. ``returns = A + V`` is
    taken before whitening; with ``whiten=True`` the advantages are :func:`masked_whiten`-ed.
    Invalid positions are 0 in both outputs. Nothing is detached: pass detached values when
    the outputs are used as targets.
    """
    r, v = _f32(token_rewards), _f32(values)
    m = _bool(mask).to(r.device)
    _check_same_shape(token_rewards=r, values=v, mask=m)
    if r.dim() != 2:
        raise ValueError(f"gae expects [N, T] tensors, got shape {tuple(r.shape)}")
    n, t = r.shape
    if isinstance(lam, Tensor):
        lam = _f32(lam).to(r.device)
        if lam.shape != (n,):
            raise ValueError(f"lam must be a float or an [{n}] tensor, got {tuple(lam.shape)}")
    r = torch.where(m, r, 0.0)
    v = torch.where(m, v, 0.0)
    next_value = r.new_zeros(n)
    next_adv = r.new_zeros(n)
    columns: list[Tensor] = []
    for i in range(t - 1, -1, -1):
        valid = m[:, i]
        delta = r[:, i] + gamma * next_value - v[:, i]
        adv_i = torch.where(valid, delta + gamma * lam * next_adv, 0.0)
        next_adv = torch.where(valid, adv_i, next_adv)
        next_value = torch.where(valid, v[:, i], next_value)
        columns.append(adv_i)
    advantages = torch.stack(columns[::-1], dim=1) if columns else r.new_zeros(n, 0)
    returns = advantages + v
    if whiten:
        advantages = masked_whiten(advantages, m)
    return advantages, returns


def length_adaptive_lam(lengths: Tensor, *, alpha: float = 0.05) -> Tensor:
    """VAPO's per-sequence GAE lambda ``clamp(1 - 1 / (alpha * L), 0, 1)`` (``[N]`` float32).

    A long sequence gets a lambda near 1 (little bias over its many steps), a short one a
    smaller lambda (less variance); pass the result as ``gae(..., lam=...)``. ``L`` is the
    number of valid tokens; ``L = 0`` gives 0.
    """
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    length = _f32(lengths)
    return (1.0 - 1.0 / (alpha * length)).clamp(0.0, 1.0)


def reinforce_pp_advantages(token_rewards: Tensor, mask: Tensor, *, gamma: float = 1.0) -> Tensor:
    """REINFORCE++: returns-to-go over valid tokens, whitened over the whole batch (``[N, T]``).

    ``G_t = r_t + gamma * G_{t+1}`` where ``t+1`` is the next *valid* token (a masked hole is
    skipped and the return carries across it), then :func:`masked_whiten` over every valid
    token of the batch: the baseline is the batch, not the prompt's group, so one completion per
    prompt is enough. Invalid positions are 0. The token rewards are the score on the last valid
    token minus ``beta * k1`` per token, as for PPO.
    """
    r = _f32(token_rewards)
    m = _bool(mask).to(r.device)
    _check_same_shape(token_rewards=r, mask=m)
    if r.dim() != 2:
        raise ValueError(f"reinforce_pp_advantages expects [N, T] tensors, got {tuple(r.shape)}")
    r = torch.where(m, r, 0.0)
    running = r.new_zeros(r.shape[0])
    columns: list[Tensor] = []
    for i in range(r.shape[1] - 1, -1, -1):
        valid = m[:, i]
        running = torch.where(valid, r[:, i] + gamma * running, running)
        columns.append(torch.where(valid, running, 0.0))
    returns = torch.stack(columns[::-1], dim=1) if columns else r
    return masked_whiten(returns, m)


def reinforce_pp_baseline_advantages(rewards: Tensor, group_ids: Tensor, mask: Tensor) -> Tensor:
    """REINFORCE++-baseline: ``R_i - mean_g(R)`` on every token, whitened over the batch.

    The group mean removes the prompt's difficulty; the whitening over all valid tokens of the
    batch (token-weighted) sets the scale, instead of GRPO's per-group std. A size-1 group gets
    0 before whitening, as in :func:`group_advantages`. Returns ``[N, T]``, 0 at invalid positions.
    """
    m = _bool(mask)
    base = group_advantages(rewards, group_ids, scale="none").to(m.device)
    if m.dim() != 2 or m.shape[0] != base.shape[0]:
        raise ValueError(
            f"mask must be [N, T] with N = {base.shape[0]} rewards, got {tuple(m.shape)}"
        )
    return masked_whiten(base[:, None].expand(m.shape), m)


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> Tensor:
    """``1 - Var(returns - values) / Var(returns)`` over valid tokens (float32 scalar).

    1 means the value model predicts the returns exactly, 0 that it is no better than their
    mean (negative: worse). 0 when the returns do not vary, i.e. their variance is below 1e-8
    (nothing to explain; float rounding in ``returns = A + V`` must not give -1e14).
    """
    v, ret = _f32(values), _f32(returns).to(_f32(values).device)
    m = _bool(mask).to(v.device)
    _check_same_shape(values=v, returns=ret, mask=m)

    def var(x: Tensor) -> Tensor:
        mean = masked_mean(x, m)
        return masked_mean((x - mean).square(), m)

    var_returns = var(ret)
    if float(var_returns) < 1e-8:
        return var_returns.new_zeros(())
    return 1.0 - var(ret - v) / var_returns


# --------------------------------------------------------------------------------------------
# losses


def _pg_inputs(
    name: str, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The checked float32 ``(logp, old_logp, advantages [N, 1 or T], mask)`` of a policy loss;
    advantages are 0 at invalid positions."""
    lp, old = _f32(logp), _f32(old_logp)
    m = _bool(mask).to(lp.device)
    _check_same_shape(logp=lp, old_logp=old, mask=m)
    if lp.dim() != 2:
        raise ValueError(f"{name} expects [N, T] log-probs, got shape {tuple(lp.shape)}")
    adv = _f32(advantages).to(lp.device)
    if adv.dim() == 1:
        adv = adv[:, None]
    if adv.shape[0] != lp.shape[0] or adv.shape[1] not in (1, lp.shape[1]):
        raise ValueError(
            f"advantages must be [N] or [N, T] for log-probs {tuple(lp.shape)}, "
            f"got {tuple(_f32(advantages).shape)}"
        )
    return lp, old, torch.where(m, adv, 0.0), m


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    level: PolicyLevel = "token",
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate per token; returns ``(loss[N, T], stats)``.

    ``advantages`` is ``[N]`` (sequence-level, broadcast over tokens) or ``[N, T]``.
    ``eps_high > eps_low`` is DAPO's Clip-Higher. ``dual_clip=c`` (c > 1) caps the loss of
    negative-advantage tokens at ``-A * c`` so a huge ratio cannot blow up the update.
    The loss is 0 (and has zero gradient) at invalid positions. ``stats`` are detached float32
    scalars, masked means over valid tokens (0 when there are none): ``clip_frac``,
    ``clip_frac_low``, ``clip_frac_high``, ``approx_kl``.

    ``level="sequence"`` is GSPO (its "GSPO-token" form, as verl computes it): every token of
    sequence ``i`` gets the ratio ``s_i = exp(mean_t(logp - old_logp))``, the geometric mean of
    its token ratios, as value, and the gradient of its own ``logp`` (``logp - sg(logp) +
    sg(log s_i)``, clamped at 10, where its gradient is 0). One clip decision per sequence
    matches the sequence-level reward, and the length normalisation keeps ``s_i`` near 1 (hence
    GSPO's tiny clip ranges, 3e-4 / 4e-4). No dual clip at sequence level. Extra stats:
    ``seq_ratio_mean``, ``seq_ratio_min``, ``seq_ratio_max`` over sequences with a valid token.
    """
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"eps_low/eps_high must be >= 0, got {eps_low}/{eps_high}")
    if dual_clip is not None and dual_clip <= 1:
        raise ValueError(f"dual_clip must be > 1 (or None), got {dual_clip}")
    if level not in ("token", "sequence"):
        raise ValueError(f"level must be 'token' or 'sequence', got {level!r}")
    if level == "sequence" and dual_clip is not None:
        raise ValueError(
            "dual_clip is not defined for level='sequence' (GSPO clips whole sequences); "
            "set dual_clip to None"
        )
    lp, old, adv, m = _pg_inputs("policy_loss", logp, old_logp, advantages, mask)
    # Mask before exp so garbage (-inf, nan) at padding cannot reach the forward or backward.
    lp = torch.where(m, lp, 0.0)
    diff = torch.where(m, lp - old, 0.0)
    if level == "sequence":
        seq_valid = m.any(dim=1)
        log_s = diff.sum(dim=1) / m.sum(dim=1).to(torch.float32).clamp(min=1)
        ratio = torch.exp((lp - lp.detach() + log_s.detach()[:, None]).clamp(max=10.0))
    else:
        ratio = torch.exp(diff.clamp(-20.0, 20.0))
    l1 = -adv * ratio
    l2 = -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss = torch.maximum(l1, l2)
    if dual_clip is not None:
        loss = torch.where(adv < 0, torch.minimum(loss, -adv * dual_clip), loss)
    loss = torch.where(m, loss, 0.0)

    with torch.no_grad():
        stats = {
            "clip_frac": masked_mean((l2 > l1).float(), m),
            "clip_frac_low": masked_mean(((ratio < 1.0 - eps_low) & (adv < 0)).float(), m),
            "clip_frac_high": masked_mean(((ratio > 1.0 + eps_high) & (adv > 0)).float(), m),
            "approx_kl": masked_mean(-diff, m),
        }
        if level == "sequence":
            s = torch.exp(log_s.clamp(max=10.0))
            any_valid = bool(seq_valid.any())
            stats["seq_ratio_mean"] = masked_mean(s, seq_valid)
            stats["seq_ratio_min"] = s[seq_valid].min() if any_valid else s.new_zeros(())
            stats["seq_ratio_max"] = s[seq_valid].max() if any_valid else s.new_zeros(())
    return loss, stats


def cispo_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO (MiniMax-M1) per token: ``-sg(clip(ratio, 1 - eps_low, 1 + eps_high)) * A * logp``.

    Returns ``(loss[N, T], stats)``. PPO's clip zeroes the gradient of a clipped token; CISPO
    clips only the (detached) importance weight, so every token keeps its REINFORCE gradient
    ``-w * A * grad(logp)`` however far its ratio moved. Both bounds are relative to 1, like
    every clip in this module (TRL's ``epsilon_high`` for CISPO is an absolute cap instead: pass
    ``eps_high = cap - 1``; ``eps_low = 1`` means no lower bound, as in the paper). ``ratio =
    exp(clamp(logp - old_logp, -20, 20))``. Stats (masked means over valid tokens):
    ``clip_frac`` (weight clipped, whatever the sign of A), ``clip_frac_low``,
    ``clip_frac_high`` (below/above the bounds), ``approx_kl`` (mean of the clamped
    ``old_logp - logp``).
    """
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"eps_low/eps_high must be >= 0, got {eps_low}/{eps_high}")
    lp, old, adv, m = _pg_inputs("cispo_loss", logp, old_logp, advantages, mask)
    lp = torch.where(m, lp, 0.0)
    log_ratio = torch.where(m, lp - old, 0.0).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    weight = ratio.clamp(1.0 - eps_low, 1.0 + eps_high).detach()
    loss = torch.where(m, -weight * adv * lp, 0.0)
    with torch.no_grad():
        stats = {
            "clip_frac": masked_mean((ratio != weight).float(), m),
            "clip_frac_low": masked_mean((ratio < 1.0 - eps_low).float(), m),
            "clip_frac_high": masked_mean((ratio > 1.0 + eps_high).float(), m),
            "approx_kl": masked_mean(-log_ratio, m),
        }
    return loss, stats


def positive_nll(
    logp: Tensor,
    mask: Tensor,
    positive: Tensor,
    *,
    num_tokens: Tensor | float | None = None,
) -> Tensor:
    """VAPO's positive-example LM loss: token-mean ``-logp`` over the sequences marked positive.

    ``positive`` is ``[N]`` (bool or 0/1; e.g. the correct completions). Imitating its own
    correct samples makes the policy exploit them faster than the policy gradient alone.
    Returns a float32 scalar, 0 (still attached to the graph) when no valid token is positive.
    Gradient accumulation: pass the whole optimizer step's positive-token count as
    ``num_tokens`` and sum the micro-batch results.
    """
    lp = _f32(logp)
    m = _bool(mask).to(lp.device)
    _check_same_shape(logp=lp, mask=m)
    pos = _bool(torch.as_tensor(positive, device=lp.device))
    if lp.dim() != 2 or pos.shape != (lp.shape[0],):
        raise ValueError(
            f"expected logp/mask [N, T] and positive [N], got {tuple(lp.shape)} and "
            f"{tuple(pos.shape)}"
        )
    selected = m & pos[:, None]
    count = selected.sum() if num_tokens is None else num_tokens
    return torch.where(selected, -lp, 0.0).sum() / _safe_denominator(count, lp)


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: KLKind) -> Tensor:
    """Per-token KL estimate of policy vs reference from sampled-token log-probs (float32).

    ``"k1"`` = ``logp - ref`` (unbiased, high variance; PPO puts it in the reward),
    ``"k2"`` = ``0.5 * (logp - ref)^2``, ``"k3"`` = ``exp(d) - d - 1`` with ``d = ref - logp``
    (unbiased, nonnegative, low variance; GRPO's choice), with ``d`` clamped to [-20, 20] and
    the result to [-10, 10] so one extreme token cannot dominate. Not masked: the caller's
    aggregation applies the mask.
    """
    lp, ref = _f32(logp), _f32(ref_logp)
    _check_same_shape(logp=lp, ref_logp=ref)
    if kind == "k1":
        return lp - ref
    if kind == "k2":
        return 0.5 * (lp - ref).square()
    if kind == "k3":
        d = (ref - lp).clamp(-20.0, 20.0)
        return (torch.exp(d) - d - 1.0).clamp(-10.0, 10.0)
    raise ValueError(f"kind must be one of {_KL_KINDS}, got {kind!r}")


def aggregate(
    loss: Tensor,
    mask: Tensor,
    mode: AggregationMode,
    *,
    norm_length: float | None = None,
    num_tokens: Tensor | float | None = None,
    num_seqs: Tensor | float | None = None,
) -> Tensor:
    """Reduce a per-token loss ``[N, T]`` to a scalar (float32).

    - ``"token-mean"``: ``sum(mask*loss) / sum(mask)``; every token weighs the same (DAPO).
    - ``"seq-mean-token-mean"``: mean over sequences with >= 1 valid token of each sequence's
      token mean (original GRPO; long sequences are down-weighted per token).
    - ``"seq-mean-token-sum"``: mean over those sequences of each sequence's token sum.
    - ``"seq-mean-token-sum-norm"``: the above divided by the constant ``norm_length``
      (Dr. GRPO: use the run's max completion length, never the batch's padded width).

    Gradient accumulation: pass the whole optimizer step's ``num_tokens`` (valid tokens, used by
    ``"token-mean"``) or ``num_seqs`` (sequences with >= 1 valid token, used by ``"seq-mean-*"``)
    and sum the micro-batch results; that equals the full-batch value. The count a mode does not
    use is ignored, so callers may always pass both. An empty selection gives 0 (not NaN),
    still attached to the graph.
    """
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    if mode == "seq-mean-token-sum-norm":
        if norm_length is None:
            raise ValueError(
                "mode 'seq-mean-token-sum-norm' needs norm_length, a constant such as the run's "
                "max_completion_length (not the padded width of the batch)"
            )
        if norm_length <= 0:
            raise ValueError(f"norm_length must be > 0, got {norm_length}")
    x = _f32(loss)
    m = _bool(mask).to(x.device)
    _check_same_shape(loss=x, mask=m)
    if x.dim() != 2:
        raise ValueError(f"aggregate expects [N, T] tensors, got shape {tuple(x.shape)}")
    x = torch.where(m, x, 0.0)

    if mode == "token-mean":
        count = m.sum() if num_tokens is None else num_tokens
        return x.sum() / _safe_denominator(count, x)

    tokens = m.sum(dim=1)
    per_seq = x.sum(dim=1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / tokens.to(torch.float32).clamp(min=1)
    count = (tokens > 0).sum() if num_seqs is None else num_seqs
    out = per_seq.sum() / _safe_denominator(count, x)
    if mode == "seq-mean-token-sum-norm":
        out = out / float(norm_length)  # type: ignore[arg-type]
    return out


# --------------------------------------------------------------------------------------------
# reward shaping and sample selection (DAPO)


def overlong_penalty(
    lengths: Tensor, *, max_length: int, buffer: int, factor: float = 1.0
) -> Tensor:
    """DAPO soft overlong punishment ``[N]`` float32, to be added to the reward.

    0 up to ``max_length - buffer`` tokens, then a linear ramp down to ``-factor`` at
    ``max_length`` (and beyond), so the model learns to stop early without a reward cliff.
    """
    if buffer <= 0:
        raise ValueError(f"buffer must be > 0, got {buffer}")
    if buffer > max_length:
        raise ValueError(f"buffer ({buffer}) must not exceed max_length ({max_length})")
    length = _f32(lengths)
    return ((max_length - buffer - length) / buffer).clamp(-1.0, 0.0) * factor


def truncation_mask(mask: Tensor, truncated: Tensor) -> Tensor:
    """Zero the whole mask row of every truncated completion (DAPO overlong filtering).

    A completion cut at the length limit has no final answer, so its reward says nothing about
    its tokens; learning from it would penalise reasoning that merely ran long.
    ``truncated`` is ``[N]`` (bool or 0/1); the returned mask keeps ``mask``'s dtype.
    """
    t = _bool(torch.as_tensor(truncated, device=mask.device))
    if mask.dim() != 2 or t.shape != (mask.shape[0],):
        raise ValueError(
            f"expected mask [N, T] and truncated [N], got {tuple(mask.shape)} and {tuple(t.shape)}"
        )
    return torch.where(t[:, None], torch.zeros_like(mask), mask)


def dynamic_sampling_keep(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """DAPO dynamic sampling: ``[N]`` bool, True for members of groups whose rewards differ.

    A group whose rewards are all equal (including a group of size 1) has zero advantage
    everywhere and only dilutes the batch. Equality is exact (max == min), not ``std > eps``,
    so float rounding in a mean cannot keep an all-equal group.
    """
    r = _f32(rewards)
    index, sizes = _groups(group_ids, r)
    g = len(sizes)
    hi = r.new_full((g,), -torch.inf).scatter_reduce(0, index, r, "amax", include_self=False)
    lo = r.new_full((g,), torch.inf).scatter_reduce(0, index, r, "amin", include_self=False)
    return (hi > lo)[index]
