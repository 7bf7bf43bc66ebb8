"""Reward shaping and sample selection (DAPO): overlong penalty, truncation mask, dynamic
sampling."""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.functional.stats import as_bool, as_float32, group_index

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
    length = as_float32(lengths)
    return ((max_length - buffer - length) / buffer).clamp(-1.0, 0.0) * factor


def truncation_mask(mask: Tensor, truncated: Tensor) -> Tensor:
    """Zero the whole mask row of every truncated completion (DAPO overlong filtering).

    A completion cut at the length limit has no final answer, so its reward says nothing about
    its tokens; learning from it would penalise reasoning that merely ran long.
    ``truncated`` is ``[N]`` (bool or 0/1); the returned mask keeps ``mask``'s dtype.
    """
    t = as_bool(torch.as_tensor(truncated, device=mask.device))
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
    r = as_float32(rewards)
    index, sizes = group_index(group_ids, r)
    g = len(sizes)
    hi = r.new_full((g,), -torch.inf).scatter_reduce(0, index, r, "amax", include_self=False)
    lo = r.new_full((g,), torch.inf).scatter_reduce(0, index, r, "amin", include_self=False)
    return (hi > lo)[index]
