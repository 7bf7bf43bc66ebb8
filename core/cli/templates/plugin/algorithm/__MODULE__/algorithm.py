"""The algorithm: rlvr's clipped policy gradient with its own advantages.

:class:`rlvr.plugin.PolicyGradient` provides ``prepare`` (loss mask, reward
shaping hook, metrics) and ``loss`` (clipped surrogate, KL, aggregation) on top of
:mod:`rlvr.functional`; a subclass overrides what differs, here :meth:`advantages`.
"""

from __future__ import annotations

import torch
from rlvr import functional as F
from rlvr.plugin import PolicyGradient


class __CLS__(PolicyGradient):
    def advantages(self, batch, rewards, mask, metrics):
        """``(advantages [N], returns None)``: reward minus the group's mean or median."""
        p = self.params
        if p.baseline == "mean":
            adv = F.group_advantages(rewards, batch.group_ids, scale="group" if p.scale else "none")
        else:
            _, index = torch.unique(batch.group_ids, return_inverse=True)
            baseline = torch.zeros_like(rewards)
            for g in range(int(index.max()) + 1 if len(index) else 0):
                members = index == g
                baseline[members] = rewards[members].median()
            adv = rewards - baseline
            if p.scale:
                adv = adv / (_group_std(rewards, index) + 1e-6)
        metrics["baseline_abs_adv"] = float(adv.abs().mean()) if len(adv) else 0.0
        return adv, None


def _group_std(rewards: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Each sample's group reward std (Bessel-corrected; 0 for a group of one)."""
    out = torch.zeros_like(rewards)
    for g in range(int(index.max()) + 1 if len(index) else 0):
        members = index == g
        if int(members.sum()) > 1:
            out[members] = rewards[members].std()
    return out
