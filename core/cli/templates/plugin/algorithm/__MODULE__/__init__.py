"""The ``__NAME__`` algorithm plugin for rlvr.

A policy gradient with a group baseline (mean or median).

After ``pip install -e .`` use it in any rlvr config::

    algorithm:
      name: __NAME__
      params: {baseline: median}

Registration is cheap on purpose (no torch here): ``rlvr plugins`` and ``rlvr validate``
import this module, while the algorithm itself (the ``algorithm`` module next to this one) is
imported by the factory when a run builds it. The object it builds follows
:class:`rlvr.api.runtime.AlgorithmImpl`; ``requirements(params)`` tells rlvr, before any model
loads, what the algorithm needs (a reference model, old log-probs, group size, ...).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from rlvr import (
    Algorithm,
    AlgorithmImpl,
    LossType,
    PolicyGradientParams,
    Requirements,
    RunInfo,
    hookimpl,
)


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


def build(params: __CLS__Params, run: RunInfo) -> AlgorithmImpl:
    """The factory: imports torch and the algorithm only now."""
    from .algorithm import __CLS__

    return __CLS__(params, run)


def requirements(params: __CLS__Params) -> Requirements:
    """What a run must provide (checked by ``rlvr validate``; no torch)."""
    return params.requirements()


@hookimpl
def rlvr_register_algorithms(register):
    register(
        Algorithm(
            name="__NAME__",
            params=__CLS__Params,
            factory=build,
            description="policy gradient with a group mean or median baseline",
            requirements=requirements,
        )
    )
