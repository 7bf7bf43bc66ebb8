"""Pass@k advantages on rlvr's shared clipped policy gradient."""

from __future__ import annotations

import math

import torch

from rlvr.plugin import PolicyGradient, metric_values


def pass_at_k_advantages(correct: torch.Tensor, group_ids: torch.Tensor, k: int) -> torch.Tensor:
    """``[N]`` float32 analytic pass@k advantages (see the README for the formula)."""
    out = torch.zeros(len(correct), dtype=torch.float32)
    for g in torch.unique(group_ids):
        rows = (group_ids == g).nonzero().squeeze(1)
        n, c = len(rows), int(correct[rows].sum())
        if n < k:
            raise ValueError(f"a group has {n} completions, fewer than k = {k}")
        reward = 1.0 - math.comb(n - c, k) / math.comb(n, k)
        std = math.sqrt(reward * (1.0 - reward))
        if std == 0.0:  # all right or all wrong: nothing to prefer
            continue
        wrong = (1.0 - reward - math.comb(n - c - 1, k - 1) / math.comb(n - 1, k - 1)) / std
        values = torch.where(correct[rows].cpu(), (1.0 - reward) / std, wrong)
        out[rows.cpu()] = values.float()
    return out.to(correct.device)


class PassAtK(PolicyGradient):
    def advantages(self, batch, rewards, mask, metrics):
        p = self.params
        correct = metric_values(batch, p.correct_metric, "correct_metric") >= p.correct_threshold
        metrics["correct_frac"] = float(correct.float().mean())  # algo/pass_at_k/correct_frac
        return pass_at_k_advantages(correct, batch.group_ids, p.k).to(rewards.device), None
