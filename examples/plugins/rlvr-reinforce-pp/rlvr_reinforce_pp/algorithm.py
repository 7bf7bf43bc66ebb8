"""REINFORCE++ on rlvr's shared clipped policy gradient and ``rlvr.functional``."""

from __future__ import annotations

import torch

from rlvr import functional as F
from rlvr.plugins.algorithms.base import PolicyGradient


class ReinforcePP(PolicyGradient):
    #: the KL goes into the reward (per token), not into the loss.
    kl_in_loss = False

    def advantages(self, batch, rewards, mask, metrics):
        p = self.params
        m = mask.bool()
        if p.baseline == "group":
            rewards = F.group_advantages(rewards, batch.group_ids, scale="none")
        returns = rewards.float()[:, None].expand(m.shape)
        if p.beta > 0:
            if batch.old_logp is None or batch.ref_logp is None:
                raise ValueError(
                    "reinforce_pp with beta > 0 needs batch.old_logp and batch.ref_logp "
                    "(its requirements ask the trainer for them)"
                )
            kl = torch.where(m, F.kl_penalty(batch.old_logp, batch.ref_logp, p.kl_kind), 0.0)
            # KL summed from each token to the end of its completion (gamma = 1).
            kl_to_go = kl.flip(1).cumsum(1).flip(1)
            returns = returns - p.beta * kl_to_go
            metrics["kl/mean"] = float(F.masked_mean(kl, m))
        advantages = F.masked_whiten(returns, m)
        metrics["returns/mean"] = float(F.masked_mean(returns, m))
        return advantages, None
