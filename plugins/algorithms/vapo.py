"""VAPO (arXiv 2504.05118): PPO made to work for long reasoning with verifiable rewards.

On top of :class:`~rlvr.plugins.algorithms.ppo.PPO` (value model, clipped value loss,
Clip-Higher and token-mean through its params):

- decoupled GAE: value targets with ``lam_critic`` (1.0, unbiased), policy advantages with
  the length-adaptive ``lam = 1 - 1/(alpha * length)`` per completion;
- the positive-example NLL term: ``positive_nll_coef`` times the token-mean NLL of the
  completions whose ``positive_metric`` reaches ``positive_threshold``;
- value pretraining: training steps 1..``value_warmup_steps`` (``batch.step``) train only the
  value model on the current policy's samples (the loss has no policy term, so the policy gets
  no gradient and the optimizer leaves it alone);
- group sampling (``min_group_size`` 2) and optional dynamic sampling, as in DAPO.

The warm-up reads only the batch's step, so ``--resume`` continues it exactly where it stopped
and no warm-up state needs saving.
"""

from __future__ import annotations

import torch

from rlvr import functional as F
from rlvr._builtin import kl_shaped_token_rewards, python_float
from rlvr.plugin import LossOutput, RolloutBatch, RunInfo, metric_values
from rlvr.plugins.algorithms.ppo import PPO


class VAPO(PPO):
    def __init__(self, params, run: RunInfo):
        super().__init__(params, run)
        self.max_generation_rounds = (
            int(params.max_generation_rounds) if params.dynamic_sampling else 1
        )
        self._positive_tokens = 0

    def warming_up(self, batch: RolloutBatch) -> bool:
        """Whether ``batch`` belongs to a value-only warm-up step (steps 1..value_warmup_steps;
        a batch outside training, step 0, trains the policy too)."""
        return 0 < batch.step <= self.params.value_warmup_steps

    # ------------------------------------------------------------------ generation side

    def select(self, batch: RolloutBatch) -> torch.Tensor | None:
        if not self.params.dynamic_sampling:
            return None
        values = metric_values(batch, self.params.filter_metric, "filter_metric")
        return F.dynamic_sampling_keep(values, batch.group_ids)

    def positive(self, batch: RolloutBatch) -> torch.Tensor:
        """``[N]`` bool: the completions the NLL term imitates."""
        p = self.params
        return metric_values(batch, p.positive_metric, "positive_metric") >= p.positive_threshold

    def advantages(self, batch: RolloutBatch, rewards, mask, metrics):
        p = self.params
        values = self.old_values(batch)
        token_rewards = kl_shaped_token_rewards(batch, rewards, mask, p, metrics)
        _, returns = F.gae(
            token_rewards, values, mask, gamma=p.gamma, lam=p.lam_critic, whiten=False
        )
        lam: float | torch.Tensor = p.lam
        if p.length_adaptive_alpha is not None:
            lam = F.length_adaptive_lam(mask.sum(dim=1), alpha=p.length_adaptive_alpha)
            metrics["lam_actor_mean"] = python_float(lam.mean()) if len(lam) else 0.0
        adv, _ = F.gae(
            token_rewards, values, mask, gamma=p.gamma, lam=lam, whiten=p.whiten_advantages
        )
        metrics["values/mean"] = python_float(F.masked_mean(values, mask))
        metrics["returns/mean"] = python_float(F.masked_mean(returns, mask))
        metrics["explained_variance"] = python_float(F.explained_variance(values, returns, mask))
        return adv, returns

    def prepare(self, batch: RolloutBatch) -> tuple[RolloutBatch, dict[str, float]]:
        out, metrics = super().prepare(batch)
        p = self.params
        warmup = p.value_warmup_steps
        metrics["warmup_progress"] = min(out.step, warmup) / warmup if warmup else 1.0
        metrics["value_only_step"] = float(self.warming_up(out))
        positive = self.positive(out)
        assert out.loss_mask is not None
        # Of the whole step: summed over ranks under data parallelism.
        local = (out.loss_mask.bool() & positive[:, None]).sum().float()
        self._positive_tokens = int(F.batch_sum(local).item())
        metrics["positive_frac"] = python_float(positive.float().mean()) if len(out) else 0.0
        return out, metrics

    # ------------------------------------------------------------------ training side

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
        mask = batch.loss_mask if batch.loss_mask is not None else batch.completion_mask
        if self.warming_up(batch):  # value pretraining: no policy term, so no policy gradient
            metrics: dict[str, float] = {}
            value_loss = self.extra_loss(batch, values, mask, num_tokens, metrics)
            return LossOutput(loss=value_loss, metrics=metrics)
        out = super().loss(batch, logp, values=values, num_tokens=num_tokens, num_seqs=num_seqs)
        if p.positive_nll_coef > 0:
            positive = self.positive(batch)
            nll = F.positive_nll(logp, mask, positive, num_tokens=self._positive_tokens)
            out.loss = out.loss + p.positive_nll_coef * nll
            out.metrics["positive_nll"] = python_float(
                F.positive_nll(logp.detach(), mask, positive)
            )
        return out
