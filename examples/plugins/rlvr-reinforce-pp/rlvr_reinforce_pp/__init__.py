"""A third-party rlvr algorithm: REINFORCE++ (and REINFORCE++-baseline).

Registration imports no torch (``rlvr plugins`` stays fast): the params model is here, the
algorithm in :mod:`rlvr_reinforce_pp.algorithm`, imported by the factory.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from rlvr import hookimpl
from rlvr.plugins.algorithms.params import LossType, PolicyGradientParams
from rlvr.records import Algorithm, Requirements


class ReinforcePPParams(PolicyGradientParams):
    """REINFORCE++: the shared clipped policy-gradient params plus its own."""

    algorithm: ClassVar[str] = "reinforce_pp"
    min_group_size: ClassVar[int] = 1

    baseline: Literal["none", "group"] = Field(
        "none",
        description="'group': subtract the prompt group's mean reward before the global "
        "normalisation (REINFORCE++-baseline; needs num_generations >= 2)",
    )
    beta: float = Field(
        0.0, ge=0.0, description="KL coefficient in the reward; 0 loads no reference model"
    )
    kl_kind: Literal["k1", "k2"] = Field(
        "k2", description="KL estimator subtracted from the token rewards"
    )
    loss_type: LossType = Field("dapo", description="loss aggregation (dapo: token mean)")

    def requirements(self) -> Requirements:
        return Requirements(
            reference_model=self.beta > 0,
            # the KL in the reward compares the sampling policy's log-probs with the reference
            old_logprobs=self.num_iterations > 1 or self.beta > 0,
            min_group_size=2 if self.baseline == "group" else 1,
        )


def build(params: ReinforcePPParams, run: Any) -> Any:
    from rlvr_reinforce_pp.algorithm import ReinforcePP

    return ReinforcePP(params, run)


def _requirements(params: ReinforcePPParams) -> Requirements:
    return params.requirements()


@hookimpl
def rlvr_register_algorithms(register):
    register(
        Algorithm(
            name="reinforce_pp",
            params=ReinforcePPParams,
            factory=build,
            description="REINFORCE++: batch-normalised advantages, token-level clip, KL in reward",
            requirements=_requirements,
        )
    )
