"""A step's batch as the update's passes take it: without the tokens an environment wrote in its
loss mask, cut to micro-batches no wider than their longest row, and their per-row results put
back in the batch's order; the micro-batches' metrics averaged by their token counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from rlvr.api.runtime import RolloutBatch


def weighted_mean(pairs: Sequence[tuple[float, float]]) -> float:
    """Mean of ``(value, weight)`` pairs; the plain mean when the weights sum to zero."""
    total = sum(w for _, w in pairs)
    if total <= 0:
        return sum(v for v, _ in pairs) / max(len(pairs), 1)
    return sum(v * w for v, w in pairs) / total


def without_environment_tokens(batch: RolloutBatch) -> RolloutBatch:
    """``batch`` (prepared) with its loss mask zero on the tokens an environment wrote
    (``action_mask`` 0), whatever the algorithm's ``prepare`` set: a third-party algorithm
    that builds its loss mask from ``completion_mask`` alone must not train on them."""
    if batch.action_mask is None:
        return batch
    mask = batch.loss_mask if batch.loss_mask is not None else batch.completion_mask
    return replace(batch, loss_mask=mask * batch.action_mask.to(mask.device, mask.dtype))


def trim(batch: RolloutBatch) -> RolloutBatch:
    """Drop padding columns every row of ``batch`` has (micro-batches need not be as wide as
    the step); token-level fields keep their alignment with ``completion_ids``."""
    width, prompt_width = batch.completion_ids.shape[1], batch.prompt_ids.shape[1]
    t = max(int(batch.completion_mask.sum(1).max().item()) if len(batch) else 1, 1)
    p = max(int(batch.prompt_mask.sum(1).max().item()) if len(batch) else 1, 1)
    out = replace(batch, prompt_ids=batch.prompt_ids[:, -p:], prompt_mask=batch.prompt_mask[:, -p:])
    if batch.frozen_hidden is not None:  # prompt + completion positions
        end = prompt_width + min(t, width)
        out.frozen_hidden = batch.frozen_hidden[:, prompt_width - min(p, prompt_width) : end]
    if t < width:
        for name in (
            "completion_ids",
            "completion_mask",
            "sampler_logp",
            "action_mask",
            "old_logp",
            "ref_logp",
            "old_values",
            "advantages",
            "returns",
            "loss_mask",
        ):
            value = getattr(out, name)
            if isinstance(value, torch.Tensor) and value.dim() == 2 and value.shape[1] == width:
                setattr(out, name, value[:, :t])
    return out


def widen(x: torch.Tensor, width: int) -> torch.Tensor:
    if x.shape[1] == width:
        return x
    pad = torch.zeros(x.shape[0], width - x.shape[1], dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], dim=1)


def in_order(parts: list[torch.Tensor], order: torch.Tensor) -> torch.Tensor:
    """The rows of ``parts`` (computed for rows ``order`` of a batch) in the batch's order."""
    values = torch.cat(parts)
    out = torch.empty_like(values)
    out[order.to(values.device)] = values
    return out


__all__ = ["in_order", "trim", "weighted_mean", "widen", "without_environment_tokens"]
