"""Sampler correction: the gap between the sampler's and the trainer's log-probs, and the
importance weights that correct for it: truncated (TIS) or masked (MIS)."""

from __future__ import annotations

import math

import torch

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


def masked_importance_weights(
    logp_train: torch.Tensor,
    logp_sampler: torch.Tensor,
    mask: torch.Tensor,
    cap: float,
) -> torch.Tensor:
    """Per-token weights ``exp(logp_train - logp_sampler)`` where that is ``<= cap``, and 0 where
    it is above (masked importance sampling): a token the trainer finds far likelier than the
    sampler did is dropped from the loss instead of kept at weight ``cap``.

    Same shapes, detachment and padding rule as :func:`truncated_importance_weights`.
    """
    weights = truncated_importance_weights(logp_train, logp_sampler, mask, cap)
    diff = logp_train.detach().float() - logp_sampler.detach().float().to(logp_train.device)
    over = mask.bool() & (diff > math.log(cap))
    return torch.where(over, torch.zeros_like(weights), weights)


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
