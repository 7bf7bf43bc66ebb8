"""CISPO (MiniMax-M1): GRPO's group advantages with the clipped-weight REINFORCE surrogate.

Only the surrogate differs from :class:`~rlvr.algorithms.base.GroupRelative`:
``rlvr.functional.cispo_loss`` instead of the clipped ratio, so no token loses its gradient.
"""

from __future__ import annotations

import torch

from rlvr import functional as F
from rlvr._builtin import GroupRelative


class CISPO(GroupRelative):
    def surrogate(
        self,
        logp: torch.Tensor,
        old_logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        p = self.params
        return F.cispo_loss(
            logp, old_logp, advantages, mask, eps_low=p.epsilon, eps_high=p.eps_high
        )
