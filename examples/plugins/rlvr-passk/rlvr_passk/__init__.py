"""A third-party rlvr algorithm: policy gradient with pass@k advantages.

Registration imports no torch (``rlvr plugins`` stays fast): the params model is here, the
algorithm in :mod:`rlvr_passk.algorithm`, imported by the factory.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from pydantic import Field

from rlvr import Algorithm, GroupParams, Requirements, hookimpl


class PassAtKParams(GroupParams):
    """The shared clipped policy-gradient params plus pass@k's own."""

    algorithm: ClassVar[str] = "pass_at_k"

    k: int = Field(4, ge=1, description="Size of the sets of tries; 1 is GRPO (pass@1).")
    correct_metric: str = Field(
        "reward", min_length=1, description="'reward' (the weighted score) or a reward label."
    )
    correct_threshold: float = Field(
        1.0, description="A completion is correct when correct_metric is >= this."
    )

    def requirements(self) -> Requirements:
        # pass@k of a group needs at least k completions of the prompt (and 2 for a baseline)
        return dataclasses.replace(super().requirements(), min_group_size=max(2, self.k))


def build(params: PassAtKParams, run: Any) -> Any:
    from rlvr_passk.algorithm import PassAtK

    return PassAtK(params, run)


def _requirements(params: PassAtKParams) -> Requirements:
    return params.requirements()


@hookimpl
def rlvr_register_algorithms(register):
    register(
        Algorithm(
            name="pass_at_k",
            params=PassAtKParams,
            factory=build,
            description="pass@k advantages: credit a group for one right answer in k tries",
            requirements=_requirements,
        )
    )
