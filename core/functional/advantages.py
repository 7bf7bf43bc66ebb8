"""Advantage estimators: group-relative, leave-one-out, GAE, REINFORCE++."""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.functional.stats import (
    as_bool,
    as_float32,
    batch_sum,
    check_same_shape,
    group_index,
    group_sum,
    masked_mean,
    masked_whiten,
    safe_denominator,
)
from rlvr.functional.types import ADVANTAGE_SCALES, AdvantageScale

# --------------------------------------------------------------------------------------------
# advantages


def _scored(scored: Tensor | None, r: Tensor) -> Tensor:
    """``[N]`` float32 weights: 1 where a reward is scored, 0 where it is left out."""
    if scored is None:
        return torch.ones_like(r)
    m = as_bool(scored).to(r.device)
    if m.shape != r.shape:
        raise ValueError(f"scored must be [N] like rewards {tuple(r.shape)}, got {tuple(m.shape)}")
    return m.to(torch.float32)


def group_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    *,
    scale: AdvantageScale = "group",
    eps: float = 1e-6,
    scored: Tensor | None = None,
) -> Tensor:
    """GRPO advantages ``R_i - mean_g(R)``, optionally divided by a std (``[N]`` float32).

    ``scale="group"`` divides by the group's std + eps (GRPO), ``"batch"`` by the std of all
    ``N`` raw rewards of the step + eps (:func:`batch_sum`), ``"none"`` not at all (Dr. GRPO,
    which argues the std division biases towards too-easy/too-hard prompts). Stds are
    Bessel-corrected. Groups may have any sizes and arbitrary ids; a group of size 1 has no
    baseline and gets 0.

    ``scored`` (``[N]`` bool, default all): rows where it is False (TRL's unscorable
    completions, every reward returned None) are left out of every mean and std, as TRL's
    ``nanmean``/``nanstd``, and get advantage 0; a group counts only its scored rows.
    """
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"scale must be one of {ADVANTAGE_SCALES}, got {scale!r}")
    r = as_float32(rewards)
    w = _scored(scored, r)
    r = torch.where(w > 0, r, 0.0)  # an unscored row's value (0 or NaN) enters no sum
    index, sizes = group_index(group_ids, r)
    groups = len(sizes)
    n = group_sum(w, index, groups)
    mean = group_sum(r, index, groups) / n.clamp(min=1)
    adv = (r - mean[index]) * w
    if scale == "group":
        var = group_sum(adv * adv, index, groups) / (n - 1).clamp(min=1)
        adv = adv / safe_denominator(var.sqrt()[index] + eps, r)
    elif scale == "batch":
        sums = batch_sum(torch.stack([w.sum(), r.sum()]))
        count, total_mean = sums[0], sums[1] / sums[0].clamp(min=1)
        var = batch_sum((w * (r - total_mean) ** 2).sum()) / (count - 1).clamp(min=1)
        adv = adv / safe_denominator(var.sqrt() + eps, r)
    return torch.where((n > 1)[index] & (w > 0), adv, 0.0)


def rloo_advantages(rewards: Tensor, group_ids: Tensor, *, scored: Tensor | None = None) -> Tensor:
    """Leave-one-out advantages ``R_i - mean_{j in g, j != i} R_j`` (``[N]`` float32).

    Computed as ``G/(G-1) * (R_i - mean_g)``; the baseline excludes the sample itself, which
    keeps the estimator unbiased. Size-1 groups have no baseline and get 0. ``scored`` as in
    :func:`group_advantages`: unscored rows are in no baseline (``G`` counts scored rows) and
    get 0.
    """
    r = as_float32(rewards)
    w = _scored(scored, r)
    r = torch.where(w > 0, r, 0.0)
    index, sizes = group_index(group_ids, r)
    groups = len(sizes)
    n = group_sum(w, index, groups)
    mean = group_sum(r, index, groups) / n.clamp(min=1)
    factor = (n / (n - 1).clamp(min=1))[index]
    return torch.where((n > 1)[index] & (w > 0), factor * (r - mean[index]), 0.0)


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
    r, v = as_float32(token_rewards), as_float32(values)
    m = as_bool(mask).to(r.device)
    check_same_shape(token_rewards=r, values=v, mask=m)
    if r.dim() != 2:
        raise ValueError(f"gae expects [N, T] tensors, got shape {tuple(r.shape)}")
    n, t = r.shape
    if isinstance(lam, Tensor):
        lam = as_float32(lam).to(r.device)
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
    length = as_float32(lengths)
    return (1.0 - 1.0 / (alpha * length)).clamp(0.0, 1.0)


def reinforce_pp_advantages(token_rewards: Tensor, mask: Tensor, *, gamma: float = 1.0) -> Tensor:
    """REINFORCE++: returns-to-go over valid tokens, whitened over the whole batch (``[N, T]``).

    ``G_t = r_t + gamma * G_{t+1}`` where ``t+1`` is the next *valid* token (a masked hole is
    skipped and the return carries across it), then :func:`masked_whiten` over every valid
    token of the batch: the baseline is the batch, not the prompt's group, so one completion per
    prompt is enough. Invalid positions are 0. The token rewards are the score on the last valid
    token minus ``beta * k1`` per token, as for PPO.
    """
    r = as_float32(token_rewards)
    m = as_bool(mask).to(r.device)
    check_same_shape(token_rewards=r, mask=m)
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


def reinforce_pp_baseline_advantages(
    rewards: Tensor, group_ids: Tensor, mask: Tensor, *, scored: Tensor | None = None
) -> Tensor:
    """REINFORCE++-baseline: ``R_i - mean_g(R)`` on every token, whitened over the batch.

    The group mean removes the prompt's difficulty; the whitening over all valid tokens of the
    batch (token-weighted) sets the scale, instead of GRPO's per-group std. A size-1 group gets
    0 before whitening, as in :func:`group_advantages`; so does an unscored row (``scored``,
    left out of its group's mean). Returns ``[N, T]``, 0 at invalid positions.
    """
    m = as_bool(mask)
    base = group_advantages(rewards, group_ids, scale="none", scored=scored).to(m.device)
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
    v, ret = as_float32(values), as_float32(returns).to(as_float32(values).device)
    m = as_bool(mask).to(v.device)
    check_same_shape(values=v, returns=ret, mask=m)

    def var(x: Tensor) -> Tensor:
        mean = masked_mean(x, m)
        return masked_mean((x - mean).square(), m)

    var_returns = var(ret)
    if float(var_returns) < 1e-8:
        return var_returns.new_zeros(())
    return 1.0 - var(ret - v) / var_returns
