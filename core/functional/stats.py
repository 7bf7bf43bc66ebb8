"""Masked and batch-wide statistics every estimator and loss reduces with."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import Tensor

# --------------------------------------------------------------------------------------------
# helpers shared by the functional modules (public names, not in rlvr.functional's __all__)


def as_float32(x: Tensor) -> Tensor:
    """Upcast to float32: bf16 sums over thousands of tokens lose too many bits."""
    return torch.as_tensor(x).to(torch.float32)


def as_bool(mask: Tensor) -> Tensor:
    mask = torch.as_tensor(mask)
    return mask if mask.dtype == torch.bool else mask != 0


def safe_denominator(count: Tensor | float, like: Tensor) -> Tensor:
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

    The identity in one process; under data parallelism (:mod:`rlvr.parallel.distributed`) an
    all-reduce
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


def check_same_shape(**tensors: Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"shape mismatch: {shapes}")


def group_index(group_ids: Tensor, rewards: Tensor) -> tuple[Tensor, Tensor]:
    """Map arbitrary (non-contiguous, unsorted) ids to ``0..G-1``; return (index[N], sizes[G])."""
    ids = torch.as_tensor(group_ids, device=rewards.device)
    if rewards.dim() != 1 or ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_ids must both be 1-D of the same length, got "
            f"{tuple(rewards.shape)} and {tuple(ids.shape)}"
        )
    _, index, sizes = torch.unique(ids, return_inverse=True, return_counts=True)
    return index, sizes


def group_sum(x: Tensor, index: Tensor, num_groups: int) -> Tensor:
    return torch.zeros(num_groups, dtype=x.dtype, device=x.device).index_add(0, index, x)


# --------------------------------------------------------------------------------------------
# masked statistics


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over positions where ``mask`` is nonzero (along ``dim``, or all).

    Returns 0 (not NaN) where nothing is selected, so empty rows/batches are harmless.
    ``x`` and ``mask`` must be broadcastable.
    """
    x = as_float32(x)
    m = as_bool(mask).to(x.device)
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
    x = as_float32(x)
    m = as_bool(mask).to(x.device)
    check_same_shape(x=x, mask=m)
    sums = batch_sum(torch.stack([m.sum().to(torch.float32), torch.where(m, x, 0.0).sum()]))
    count = sums[0]
    mean = sums[1] / count.clamp(min=1)
    dev = torch.where(m, x - mean, 0.0)
    var = batch_sum((dev * dev).sum()) / (count - 1).clamp(min=1)
    return dev * torch.rsqrt(var + eps)
