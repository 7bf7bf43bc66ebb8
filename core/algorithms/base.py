"""The clipped policy-gradient implementation every built-in algorithm shares.

:class:`PolicyGradient` drives ``rlvr.functional``: shape rewards, compute advantages, build the
loss mask (``prepare``), then the clipped surrogate plus an optional KL term aggregated in the
algorithm's mode (``loss``). Subclasses change only what differs: the advantage estimator
(:class:`GroupRelative` for GRPO/Dr. GRPO/GSPO; RLOO, CISPO, DAPO, PPO, REINFORCE++ and
VAPO in the built-in plugins), the surrogate
(CISPO), and DAPO/PPO/REINFORCE++/VAPO in their own modules. The helpers below
(:func:`metric_values`, :func:`kl_shaped_token_rewards`) are shared by several of them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from rlvr import functional as F
from rlvr.api.runtime import LossOutput, RolloutBatch, RunInfo


def python_float(x: torch.Tensor | float) -> float:
    return float(x.detach().float().item()) if isinstance(x, torch.Tensor) else float(x)


def metric_values(batch: RolloutBatch, metric: str, setting: str) -> torch.Tensor:
    """``[N]`` float32: the weighted score (``metric == "reward"``) or one reward's values
    (None/NaN counts as 0). ``setting`` names the param, for the error message."""
    if metric == "reward":
        return batch.scores.float()
    if metric not in batch.reward_components:
        have = ", ".join(sorted(batch.reward_components)) or "none"
        raise KeyError(
            f"{setting} {metric!r} is not a reward label of this run (labels: {have}); set "
            f"algorithm.params.{setting} to 'reward' or one of them"
        )
    return torch.nan_to_num(batch.reward_components[metric].float(), nan=0.0)


def importance_ratio_stats(
    logp_train: torch.Tensor, logp_sampler: torch.Tensor, mask: torch.Tensor, params: Any
) -> dict[str, float]:
    """How far the sampler was from the trainer this batch: the largest ratio pi_train /
    pi_sampler and the share of tokens over the cap (truncated or masked, by the mode)."""
    valid = mask.bool()
    if not bool(valid.any()):
        return {}
    log_ratio = (logp_train.detach().float() - logp_sampler.float().to(logp_train.device))[valid]
    over = (log_ratio > math.log(params.importance_sampling_cap)).float().mean()
    return {
        "importance_weight/ratio_max": python_float(log_ratio.max().clamp(max=80.0).exp()),
        "importance_weight/over_cap_frac": python_float(over),
    }


def last_token_rewards(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[N, T]`` zeros with each row's score on its last valid token (rows with none: 0)."""
    m = mask.bool()
    positions = torch.arange(m.shape[1], device=m.device).expand_as(m)
    last = torch.where(m, positions, -1).amax(dim=1)
    out = torch.zeros(m.shape, dtype=torch.float32, device=m.device)
    rows = torch.nonzero(last >= 0).squeeze(1)
    out[rows, last[rows]] = scores.float().to(m.device)[rows]
    return out


def kl_shaped_token_rewards(
    batch: RolloutBatch,
    scores: torch.Tensor,
    mask: torch.Tensor,
    params: Any,
    metrics: dict[str, float],
) -> torch.Tensor:
    """PPO's and REINFORCE++'s token rewards: the score on the last valid token minus
    ``beta * KL(old policy, reference)`` on every valid token (``params.kl_kind``)."""
    token_rewards = last_token_rewards(scores, mask)
    if params.beta > 0:
        if batch.old_logp is None or batch.ref_logp is None:
            raise ValueError(
                f"{params.algorithm} with beta > 0 needs batch.old_logp and batch.ref_logp for "
                "the KL in the reward (requirements.reference_model/old_logprobs ask the "
                "trainer for them)"
            )
        kl = F.kl_penalty(batch.old_logp, batch.ref_logp, params.kl_kind)
        token_rewards = token_rewards - params.beta * torch.where(mask.bool(), kl, 0.0)
        metrics["kl/mean"] = python_float(F.masked_mean(kl, mask))
    return token_rewards


class PolicyGradient:
    """Shared :class:`~rlvr.api.runtime.AlgorithmImpl`: clipped surrogate
    (``epsilon``/``epsilon_high``/``delta``), ``beta * kl_kind`` KL added per token,
    aggregation by ``params.aggregation``.

    Subclasses implement :meth:`advantages` and may override :meth:`shape_rewards`,
    :meth:`select` and :meth:`extra_loss`.
    """

    #: False where the KL belongs in the reward instead of the loss (PPO).
    kl_in_loss: bool = True

    def __init__(self, params: Any, run: RunInfo):
        self.params = params
        self.run = run
        self.num_iterations = int(params.num_iterations)
        self.max_generation_rounds = 1
        self.value_learning_rate: float | None = None

    # ------------------------------------------------------------------ generation side

    def select(self, batch: RolloutBatch) -> torch.Tensor | None:
        return None

    def shape_rewards(
        self, batch: RolloutBatch, scores: torch.Tensor, metrics: dict[str, float]
    ) -> torch.Tensor:
        """The rewards the advantages are computed from (``[N]`` float32)."""
        return scores

    def advantages(
        self,
        batch: RolloutBatch,
        rewards: torch.Tensor,
        mask: torch.Tensor,
        metrics: dict[str, float],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(advantages [N] or [N, T], returns or None)``."""
        raise NotImplementedError

    def loss_mask(self, batch: RolloutBatch) -> torch.Tensor:
        mask = batch.completion_mask
        if batch.action_mask is not None:  # an environment's tokens are not the policy's
            mask = mask * batch.action_mask
        if self.params.mask_truncated_completions:
            mask = F.truncation_mask(mask, batch.truncated)
        return mask

    @torch.no_grad()
    def prepare(self, batch: RolloutBatch) -> tuple[RolloutBatch, dict[str, float]]:
        metrics: dict[str, float] = {}
        mask = self.loss_mask(batch)
        rewards = self.shape_rewards(batch, batch.scores.float(), metrics)
        advantages, returns = self.advantages(batch, rewards, mask, metrics)
        valid = mask.bool() if advantages.dim() == 2 else mask.bool().any(dim=1)
        metrics["reward/mean"] = python_float(rewards.mean()) if len(rewards) else 0.0
        metrics["advantages/mean"] = python_float(F.masked_mean(advantages, valid))
        metrics["advantages/abs_mean"] = python_float(F.masked_mean(advantages.abs(), valid))
        if self.params.mask_truncated_completions:
            metrics["masked_frac"] = 1.0 - python_float(mask.bool().any(dim=1).float().mean())
        out = dataclasses.replace(batch, advantages=advantages, loss_mask=mask)
        if returns is not None:
            out.returns = returns
        return out, metrics

    def inert(self, batch: RolloutBatch) -> torch.Tensor | None:
        """Rows whose advantages are all zero: the clipped surrogate (any level, CISPO's too,
        with or without importance weights) is ``advantage x something`` per token, so their
        loss and its gradient are exactly zero, and the update skips their passes. Not with a
        KL term in the loss (``beta > 0``), nor when a subclass changes ``loss`` or
        ``extra_loss`` (PPO's value loss, VAPO's NLL term): those may pull on every row, so a
        subclass that adds a term skips nothing unless it overrides this method too."""
        if batch.advantages is None or (self.kl_in_loss and self.params.beta > 0):
            return None
        cls = type(self)
        if cls.loss is not PolicyGradient.loss or cls.extra_loss is not PolicyGradient.extra_loss:
            return None
        zero = batch.advantages == 0
        return zero.all(dim=1) if zero.dim() == 2 else zero

    # ------------------------------------------------------------------ training side

    def extra_loss(
        self,
        batch: RolloutBatch,
        values: torch.Tensor | None,
        mask: torch.Tensor,
        num_tokens: int | torch.Tensor,
        metrics: dict[str, float],
    ) -> torch.Tensor | None:
        """A term added to the loss (PPO's value loss), already normalised; None for none."""
        return None

    def surrogate(
        self,
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The per-token policy loss and its stats: the clipped surrogate (per token or, with
        ``level: sequence``, GSPO's per-sequence ratio)."""
        p = self.params
        return F.policy_loss(
            logp,
            old_logp,
            advantages,
            mask,
            eps_low=p.epsilon,
            eps_high=p.eps_high,
            dual_clip=p.delta,
            level=p.level,
        )

    def loss(
        self,
        batch: RolloutBatch,
        logp: torch.Tensor,
        *,
        values: torch.Tensor | None = None,
        num_tokens: int | torch.Tensor,
        num_seqs: int | torch.Tensor,
    ) -> LossOutput:
        p = self.params
        if batch.advantages is None:
            raise ValueError("batch has no advantages: call prepare() before loss()")
        mask = batch.loss_mask if batch.loss_mask is not None else batch.completion_mask
        old_logp = batch.old_logp if batch.old_logp is not None else logp.detach()
        per_token, stats = self.surrogate(logp, old_logp, batch.advantages, mask)

        def reduce(x: torch.Tensor, **counts: Any) -> torch.Tensor:
            return F.aggregate(
                x, mask, p.aggregation, norm_length=self.run.max_completion_length, **counts
            )

        metrics = {k: python_float(v) for k, v in stats.items()}
        if p.importance_sampling_correction:
            if batch.sampler_logp is None:
                raise ValueError(
                    "importance_sampling_correction needs the sampler's log-probabilities in "
                    "batch.sampler_logp; use a backend that returns them (e.g. vllm)"
                )
            weigh = (
                F.masked_importance_weights
                if p.importance_sampling_mode == "mask"
                else F.truncated_importance_weights
            )
            weights = weigh(old_logp, batch.sampler_logp, mask, p.importance_sampling_cap)
            per_token = per_token * weights
            metrics["importance_weight/mean"] = python_float(F.masked_mean(weights, mask))
            metrics.update(importance_ratio_stats(old_logp, batch.sampler_logp, mask, p))
        metrics["policy_loss"] = python_float(reduce(per_token.detach()))
        if self.kl_in_loss and p.beta > 0:
            if batch.ref_logp is None:
                raise ValueError(
                    f"beta = {p.beta} needs the reference model's log-probs in batch.ref_logp "
                    "(requirements.reference_model is set, so the trainer must fill it)"
                )
            kl = F.kl_penalty(logp, batch.ref_logp, p.kl_kind)
            per_token = per_token + p.beta * kl
            metrics["kl"] = python_float(F.masked_mean(kl.detach(), mask))
        loss = reduce(per_token, num_tokens=num_tokens, num_seqs=num_seqs)
        extra = self.extra_loss(batch, values, mask, num_tokens, metrics)
        if extra is not None:
            loss = loss + extra
        return LossOutput(loss=loss, metrics=metrics)

    def build_value_model(self, policy: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not use a value model")


class GroupRelative(PolicyGradient):
    """GRPO and Dr. GRPO: ``R_i - mean_g(R)``, scaled by ``params.scale_rewards``; rows
    ``batch.scored`` marks False are left out of the baselines (TRL's None rule)."""

    def advantages(self, batch, rewards, mask, metrics):
        # scored: completions every reward left None are in no baseline and get 0 (as TRL)
        scale = self.params.scale_rewards
        adv = F.group_advantages(rewards, batch.group_ids, scale=scale, scored=batch.scored)
        return adv, None
