"""DAPO: GRPO's group advantages plus dynamic sampling and the soft overlong penalty.

Clip-Higher (``epsilon_high``), the token-level loss (``loss_type: dapo``) and overlong
filtering (``mask_truncated_completions``) are plain params of the shared
:class:`~rlvr.algorithms.base.PolicyGradient`; only sample selection and reward shaping
live here.
"""

from __future__ import annotations

import torch

from rlvr import functional as F
from rlvr._builtin import GroupRelative, python_float
from rlvr.plugin import RolloutBatch, RunInfo, metric_values


class DAPO(GroupRelative):
    def __init__(self, params, run: RunInfo):
        super().__init__(params, run)
        self.max_generation_rounds = int(params.max_generation_rounds)
        overlong = params.overlong_penalty
        self.overlong: tuple[int, int] | None = None
        if overlong.enabled:
            max_length, buffer = overlong.resolve(run.max_completion_length)
            if buffer > max_length:
                raise ValueError(
                    f"overlong_penalty.buffer ({buffer}) must not exceed its max_length "
                    f"({max_length})"
                )
            self.overlong = (max_length, buffer)

    def filter_values(self, batch: RolloutBatch) -> torch.Tensor:
        """The metric dynamic sampling compares within a group (None/NaN counts as 0)."""
        return metric_values(batch, self.params.filter_metric, "filter_metric")

    def select(self, batch: RolloutBatch) -> torch.Tensor | None:
        if not self.params.dynamic_sampling:
            return None
        return F.dynamic_sampling_keep(self.filter_values(batch), batch.group_ids)

    def shape_rewards(self, batch, scores, metrics):
        if self.overlong is None:
            return scores
        max_length, buffer = self.overlong
        penalty = F.overlong_penalty(
            batch.lengths,
            max_length=max_length,
            buffer=buffer,
            factor=self.params.overlong_penalty.factor,
        ).to(scores.device)
        if len(penalty):
            metrics["overlong_penalty/mean"] = python_float(penalty.mean())
            metrics["overlong_penalty/frac"] = python_float((penalty < 0).float().mean())
        return scores + penalty
