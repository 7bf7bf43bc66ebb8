"""Pure math of rlvr: advantages, policy loss, KL, aggregation, reward shaping (tensors), and
the pass@k estimator.

This module is public API (third-party algorithm plugins import it) and implements exactly the
contract in ``docs/algorithms.md``. Every tensor function is device- and dtype-agnostic: inputs
may be float32 or bfloat16 (or integer where that makes sense), and all math runs and returns
in float32 so that bf16 training does not silently change losses or advantages.

A ``mask`` may have any dtype (bool, int, float); a nonzero entry marks a token that counts.
Values at masked-out positions are never read into a result, so padding may hold anything,
including ``inf``/``nan``, without poisoning results or gradients.
"""

from __future__ import annotations

from rlvr.functional.advantages import (
    explained_variance,
    gae,
    group_advantages,
    length_adaptive_lam,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
)
from rlvr.functional.losses import aggregate, cispo_loss, kl_penalty, policy_loss, positive_nll
from rlvr.functional.pass_at_k import mean_pass_at_k, pass_at_k
from rlvr.functional.sampler import (
    logprob_gap_stats,
    masked_importance_weights,
    truncated_importance_weights,
)
from rlvr.functional.shaping import dynamic_sampling_keep, overlong_penalty, truncation_mask
from rlvr.functional.stats import batch_reducer, batch_sum, masked_mean, masked_whiten
from rlvr.functional.types import AdvantageScale, AggregationMode, KLKind, PolicyLevel

__all__ = [
    "logprob_gap_stats",
    "masked_importance_weights",
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
    "mean_pass_at_k",
    "overlong_penalty",
    "pass_at_k",
    "policy_loss",
    "positive_nll",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "rloo_advantages",
    "truncation_mask",
]
