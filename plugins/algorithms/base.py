"""The clipped policy-gradient implementation every built-in algorithm shares.

:class:`PolicyGradient` drives ``rlvr.functional``: shape rewards, compute advantages, build the
loss mask (``prepare``), then the clipped surrogate plus an optional KL term aggregated in the
algorithm's mode (``loss``). Subclasses change only what differs: the advantage estimator
(:class:`GroupRelative` for GRPO/Dr. GRPO, :class:`LeaveOneOut` for RLOO), and DAPO/PPO in their
own modules.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from rlvr import functional as F
from rlvr.protocols import LossOutput, RolloutBatch, RunInfo


def _float(x: torch.Tensor | float) -> float:
    return float(x.detach().float().item()) if isinstance(x, torch.Tensor) else float(x)


class PolicyGradient:
    """Shared :class:`~rlvr.protocols.AlgorithmImpl`: clipped surrogate
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
        metrics["reward/mean"] = _float(rewards.mean()) if len(rewards) else 0.0
        metrics["advantages/mean"] = _float(F.masked_mean(advantages, valid))
        metrics["advantages/abs_mean"] = _float(F.masked_mean(advantages.abs(), valid))
        if self.params.mask_truncated_completions:
            metrics["masked_frac"] = 1.0 - _float(mask.bool().any(dim=1).float().mean())
        out = dataclasses.replace(batch, advantages=advantages, loss_mask=mask)
        if returns is not None:
            out.returns = returns
        return out, metrics

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
        per_token, stats = F.policy_loss(
            logp,
            old_logp,
            batch.advantages,
            mask,
            eps_low=p.epsilon,
            eps_high=p.eps_high,
            dual_clip=p.delta,
        )

        def reduce(x: torch.Tensor, **counts: Any) -> torch.Tensor:
            return F.aggregate(
                x, mask, p.aggregation, norm_length=self.run.max_completion_length, **counts
            )

        metrics = {k: _float(v) for k, v in stats.items()}
        if p.importance_sampling_correction:
            if batch.sampler_logp is None:
                raise ValueError(
                    "importance_sampling_correction needs the sampler's log-probabilities in "
                    "batch.sampler_logp; use a backend that returns them (e.g. vllm)"
                )
            weights = F.truncated_importance_weights(
                old_logp, batch.sampler_logp, mask, p.importance_sampling_cap
            )
            per_token = per_token * weights
            metrics["importance_weight/mean"] = _float(F.masked_mean(weights, mask))
        metrics["policy_loss"] = _float(reduce(per_token.detach()))
        if self.kl_in_loss and p.beta > 0:
            if batch.ref_logp is None:
                raise ValueError(
                    f"beta = {p.beta} needs the reference model's log-probs in batch.ref_logp "
                    "(requirements.reference_model is set, so the trainer must fill it)"
                )
            kl = F.kl_penalty(logp, batch.ref_logp, p.kl_kind)
            per_token = per_token + p.beta * kl
            metrics["kl"] = _float(F.masked_mean(kl.detach(), mask))
        loss = reduce(per_token, num_tokens=num_tokens, num_seqs=num_seqs)
        extra = self.extra_loss(batch, values, mask, num_tokens, metrics)
        if extra is not None:
            loss = loss + extra
        return LossOutput(loss=loss, metrics=metrics)

    def build_value_model(self, policy: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not use a value model")


class GroupRelative(PolicyGradient):
    """GRPO and Dr. GRPO: ``R_i - mean_g(R)``, scaled by ``params.scale_rewards``."""

    def advantages(self, batch, rewards, mask, metrics):
        adv = F.group_advantages(rewards, batch.group_ids, scale=self.params.scale_rewards)
        return adv, None


class LeaveOneOut(PolicyGradient):
    """RLOO: ``R_i - mean_{j != i} R_j`` within the prompt's group."""

    def advantages(self, batch, rewards, mask, metrics):
        return F.rloo_advantages(rewards, batch.group_ids), None
