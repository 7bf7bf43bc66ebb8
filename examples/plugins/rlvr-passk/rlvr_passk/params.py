"""The params of the ``pass_at_k`` algorithm (pydantic only, no torch)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from pydantic import Field

from rlvr.plugin import GroupParams, Requirements


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
