"""The params of the ``__NAME__`` algorithm.

What ``algorithm.params`` holds in a config. pydantic only (no torch): registering the
plugin and ``rlvr validate`` read this model without importing the algorithm itself.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from rlvr.plugin import LossType, PolicyGradientParams


class __CLS__Params(PolicyGradientParams):
    """The algorithm's params (``algorithm.params``): the shared clipped policy-gradient
    settings (``epsilon``, ``beta``, ``loss_type``, ``num_iterations``, ...) plus its own."""

    algorithm: ClassVar[str] = "__NAME__"
    #: a baseline from the other completions of the prompt needs at least two of them.
    min_group_size: ClassVar[int] = 2

    baseline: Literal["mean", "median"] = Field(
        "mean", description="subtract the group's mean or median reward"
    )
    scale: bool = Field(False, description="divide by the group's reward std (GRPO-style)")
    loss_type: LossType = Field("dapo", description="loss aggregation (dapo: token mean)")
