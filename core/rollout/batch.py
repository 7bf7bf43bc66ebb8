"""The :class:`~rlvr.api.runtime.RolloutBatch` of a step's completions (:func:`build_batch`):
the tensors the algorithm's ``select``, ``prepare`` and ``loss`` read."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from rlvr.api.runtime import RolloutBatch
from rlvr.rollout.completions import Completion


def _pad_right(rows: Sequence[Sequence[Any]], width: int, value: Any, dtype) -> torch.Tensor:
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, r in enumerate(rows):
        if len(r):
            out[i, : len(r)] = torch.tensor(list(r), dtype=dtype)
    return out


def _pad_left(rows: Sequence[Sequence[int]], width: int, value: int) -> torch.Tensor:
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        if len(r):
            out[i, width - len(r) :] = torch.tensor(list(r), dtype=torch.long)
    return out


def build_batch(
    items: Sequence[Completion], labels: Sequence[str], pad_id: int, step: int = 0
) -> RolloutBatch:
    """The tensors of ``items`` (CPU): prompts left-padded, completions right-padded."""
    p = max((len(c.prompt_ids) for c in items), default=1)
    t = max(max((len(c.token_ids) for c in items), default=1), 1)
    # the configured rewards, then the environment's (their names are in ``rewards`` too)
    names = dict.fromkeys([*labels, *(k for c in items for k in c.rewards)])
    components = {
        label: torch.tensor(
            [math.nan if (v := c.rewards.get(label)) is None else v for c in items],
            dtype=torch.float32,
        )
        for label in names
    }
    sampler_logp = None
    rows = [c.sampler_logp for c in items]
    if items and all(r is not None for r in rows):
        sampler_logp = _pad_right(rows, t, 0.0, torch.float32)  # type: ignore[arg-type]
    action_mask = None
    if any(c.action_mask is not None for c in items):
        masks = [[1] * len(c.token_ids) if c.action_mask is None else c.action_mask for c in items]
        action_mask = _pad_right(masks, t, 0, torch.long)
    return RolloutBatch(
        prompt_ids=_pad_left([c.prompt_ids for c in items], p, pad_id),
        prompt_mask=_pad_left([[1] * len(c.prompt_ids) for c in items], p, 0),
        completion_ids=_pad_right([c.token_ids for c in items], t, pad_id, torch.long),
        completion_mask=_pad_right([[1] * len(c.token_ids) for c in items], t, 0, torch.long),
        group_ids=torch.tensor([c.group for c in items], dtype=torch.long),
        scores=torch.tensor([c.score for c in items], dtype=torch.float32),
        lengths=torch.tensor([len(c.token_ids) for c in items], dtype=torch.long),
        truncated=torch.tensor([c.truncated for c in items], dtype=torch.bool),
        reward_components=components,
        sampler_logp=sampler_logp,
        action_mask=action_mask,
        step=step,
        scored=torch.tensor([c.scored for c in items], dtype=torch.bool),
    )


__all__ = ["build_batch"]
