"""RLOO: the leave-one-out baseline within each prompt's group."""

from __future__ import annotations

from rlvr import functional as F
from rlvr.plugin import PolicyGradient


class LeaveOneOut(PolicyGradient):
    """RLOO: ``R_i - mean_{j != i} R_j`` within the prompt's group."""

    def advantages(self, batch, rewards, mask, metrics):
        return F.rloo_advantages(rewards, batch.group_ids, scored=batch.scored), None
