"""Packing the rows that share a prompt into one sequence (:func:`plan_packing`): the prompt
once, then each completion, so a pass computes a group's prompt once, not once per completion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlvr.model.decoder import decoder_layers

# A group's completions share one prompt, which row by row every pass computes once per
# completion (in the example the prompt is over half of a row's tokens). Packed, a group is one
# sequence, its prompt and then each completion, under an attention mask that lets a completion
# see the prompt and its own earlier tokens only, with positions that restart after the prompt
# for each completion: every completion token gets the hidden state its own row would give.

#: Attention implementations that take a custom ``[B, 1, L, L]`` mask as it is.
_PACKABLE_ATTENTION = frozenset({"sdpa", "eager"})


@dataclass(frozen=True)
class Packing:
    """Where the rows' tokens (``[N, P + T]``: prompts left-padded, completions right-padded)
    sit in the packed sequences ``[B, L]``; positions are flat (``row * width + column``)."""

    #: the decoder body's inputs for the packed sequences.
    kwargs: dict[str, Any]
    #: ``(B, L)``.
    shape: tuple[int, int]
    #: ``[M]``: the packed positions whose hidden states score the real completion tokens, in
    #: the order of ``completion_mask``'s ones (position j scores token j + 1).
    scored: torch.Tensor
    #: ``[B * L]``: for each packed position, a row position holding the same token.
    source: torch.Tensor
    #: ``[N * (P + T)]``: for each row position, the packed position of its token (padding: a
    #: real position of the same group, so its values stay finite).
    target: torch.Tensor


def packable(body: Any) -> bool:
    """Whether ``body`` can run packed rows: decoder layers, an attention implementation that
    takes a custom mask, full attention in every layer."""
    config = getattr(body, "config", None)
    if decoder_layers(body) is None:
        return False
    if getattr(config, "_attn_implementation", None) not in _PACKABLE_ATTENTION:
        return False
    return all(kind == "full_attention" for kind in getattr(config, "layer_types", None) or [])


def _layer_work(body: Any, rows: int, width: int) -> float:
    """Multiply-adds of one decoder layer over ``rows x width`` tokens: its weights once per
    token, and attention over every (query, key) pair of a row (a mask saves no work)."""
    layers = decoder_layers(body)
    assert layers is not None
    weights = sum(p.numel() for p in layers[0].parameters())
    return rows * width * (weights + 2 * body.config.hidden_size * width)


def plan_packing(
    body: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> Packing | None:
    """The rows with equal prompts as one sequence each; None where no prompt is shared, the
    packed batch would be more work than the rows (long completions: attention grows with the
    square of a sequence's length), or the layout is not the trainer's."""
    n, p = prompt_ids.shape
    t = completion_ids.shape[1]
    if n < 2 or not packable(body):
        return None
    pm, cm = prompt_mask.bool().cpu(), completion_mask.bool().cpu()
    pl, cl = pm.sum(1), cm.sum(1)
    left_padded = torch.equal(pm, torch.arange(p) >= (p - pl)[:, None])
    right_padded = torch.equal(cm, torch.arange(t) < cl[:, None])
    if not (left_padded and right_padded) or bool((pl == 0).any()):
        return None
    prompts, completions = prompt_ids.cpu(), completion_ids.cpu()
    groups: dict[tuple[int, ...], list[int]] = {}
    for i in range(n):
        groups.setdefault(tuple(prompts[i, p - int(pl[i]) :].tolist()), []).append(i)
    b = len(groups)
    length = max(int(pl[rows[0]]) + int(cl[rows].sum()) for rows in groups.values())
    window = getattr(body.config, "sliding_window", None)
    if getattr(body.config, "use_sliding_window", True) is False:
        window = None
    if b == n or (window is not None and length > window):
        return None
    if _layer_work(body, b, length) >= _layer_work(body, n, p + t):
        return None

    width = p + t
    ids = torch.zeros(b, length, dtype=torch.long)
    pos = torch.zeros(b, length, dtype=torch.long)
    seg = torch.full((b, length), -1)  # 0: the prompt, k: the k-th completion, -1: padding
    source = torch.zeros(b, length, dtype=torch.long)
    target = torch.zeros(n, width, dtype=torch.long)
    scored = torch.zeros(n, t, dtype=torch.long)
    for g, rows in enumerate(groups.values()):
        first, lp, at = rows[0], int(pl[rows[0]]), g * length
        prompt = torch.arange(lp)
        ids[g, :lp], pos[g, :lp], seg[g, :lp] = prompts[first, p - lp :], prompt, 0
        source[g, :lp] = first * width + p - lp + prompt
        start = lp
        for k, i in enumerate(rows, 1):
            lc = int(cl[i])
            own = torch.arange(lc)
            span = slice(start, start + lc)
            ids[g, span], pos[g, span], seg[g, span] = completions[i, :lc], lp + own, k
            source[g, span] = i * width + p + own
            target[i] = at  # padding
            target[i, p - lp : p] = at + prompt
            target[i, p : p + lc] = at + start + own
            scored[i, :lc] = at + torch.cat([torch.tensor([lp - 1]), start + own[:-1]])
            start += lc
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    sq, sk = seg[:, :, None], seg[:, None, :]
    allowed = (causal & ((sk == sq) | ((sk == 0) & (sq > 0))))[:, None]
    device = prompt_ids.device
    if body.config._attn_implementation == "eager":  # an additive mask
        mask = torch.zeros(allowed.shape).masked_fill_(~allowed, torch.finfo(torch.float32).min)
    else:
        mask = allowed
    kwargs = {
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "position_ids": pos.to(device),
        "use_cache": False,
    }
    return Packing(
        kwargs=kwargs,
        shape=(b, length),
        scored=scored[cm].to(device),
        source=source.flatten().to(device),
        target=target.flatten().to(device),
    )


__all__ = ["Packing", "packable", "plan_packing"]
