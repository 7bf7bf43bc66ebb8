"""Policy losses (clipped ratio, CISPO), the positive-example NLL, KL estimators and the
aggregation of token terms into one scalar."""

from __future__ import annotations

import torch
from torch import Tensor

from rlvr.functional.stats import (
    as_bool,
    as_float32,
    check_same_shape,
    masked_mean,
    safe_denominator,
)
from rlvr.functional.types import AGGREGATION_MODES, KL_KINDS, AggregationMode, KLKind, PolicyLevel

# --------------------------------------------------------------------------------------------
# losses


def _pg_inputs(
    name: str, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The checked float32 ``(logp, old_logp, advantages [N, 1 or T], mask)`` of a policy loss;
    advantages are 0 at invalid positions."""
    lp, old = as_float32(logp), as_float32(old_logp)
    m = as_bool(mask).to(lp.device)
    check_same_shape(logp=lp, old_logp=old, mask=m)
    if lp.dim() != 2:
        raise ValueError(f"{name} expects [N, T] log-probs, got shape {tuple(lp.shape)}")
    adv = as_float32(advantages).to(lp.device)
    if adv.dim() == 1:
        adv = adv[:, None]
    if adv.shape[0] != lp.shape[0] or adv.shape[1] not in (1, lp.shape[1]):
        raise ValueError(
            f"advantages must be [N] or [N, T] for log-probs {tuple(lp.shape)}, "
            f"got {tuple(as_float32(advantages).shape)}"
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
    lp = as_float32(logp)
    m = as_bool(mask).to(lp.device)
    check_same_shape(logp=lp, mask=m)
    pos = as_bool(torch.as_tensor(positive, device=lp.device))
    if lp.dim() != 2 or pos.shape != (lp.shape[0],):
        raise ValueError(
            f"expected logp/mask [N, T] and positive [N], got {tuple(lp.shape)} and "
            f"{tuple(pos.shape)}"
        )
    selected = m & pos[:, None]
    count = selected.sum() if num_tokens is None else num_tokens
    return torch.where(selected, -lp, 0.0).sum() / safe_denominator(count, lp)


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: KLKind) -> Tensor:
    """Per-token KL estimate of policy vs reference from sampled-token log-probs (float32).

    ``"k1"`` = ``logp - ref`` (unbiased, high variance; PPO puts it in the reward),
    ``"k2"`` = ``0.5 * (logp - ref)^2``, ``"k3"`` = ``exp(d) - d - 1`` with ``d = ref - logp``
    (unbiased, nonnegative, low variance; GRPO's choice), with ``d`` clamped to [-20, 20] and
    the result to [-10, 10] so one extreme token cannot dominate. Not masked: the caller's
    aggregation applies the mask.
    """
    lp, ref = as_float32(logp), as_float32(ref_logp)
    check_same_shape(logp=lp, ref_logp=ref)
    if kind == "k1":
        return lp - ref
    if kind == "k2":
        return 0.5 * (lp - ref).square()
    if kind == "k3":
        d = (ref - lp).clamp(-20.0, 20.0)
        return (torch.exp(d) - d - 1.0).clamp(-10.0, 10.0)
    raise ValueError(f"kind must be one of {KL_KINDS}, got {kind!r}")


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
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"mode must be one of {AGGREGATION_MODES}, got {mode!r}")
    if mode == "seq-mean-token-sum-norm":
        if norm_length is None:
            raise ValueError(
                "mode 'seq-mean-token-sum-norm' needs norm_length, a constant such as the run's "
                "max_completion_length (not the padded width of the batch)"
            )
        if norm_length <= 0:
            raise ValueError(f"norm_length must be > 0, got {norm_length}")
    x = as_float32(loss)
    m = as_bool(mask).to(x.device)
    check_same_shape(loss=x, mask=m)
    if x.dim() != 2:
        raise ValueError(f"aggregate expects [N, T] tensors, got shape {tuple(x.shape)}")
    x = torch.where(m, x, 0.0)

    if mode == "token-mean":
        count = m.sum() if num_tokens is None else num_tokens
        return x.sum() / safe_denominator(count, x)

    tokens = m.sum(dim=1)
    per_seq = x.sum(dim=1)
    if mode == "seq-mean-token-mean":
        per_seq = per_seq / tokens.to(torch.float32).clamp(min=1)
    count = (tokens > 0).sum() if num_seqs is None else num_seqs
    out = per_seq.sum() / safe_denominator(count, x)
    if mode == "seq-mean-token-sum-norm":
        out = out / float(norm_length)  # type: ignore[arg-type]
    return out
