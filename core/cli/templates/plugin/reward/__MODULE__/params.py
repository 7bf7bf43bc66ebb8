"""The params of the ``__NAME__`` reward.

What ``rewards[].params`` holds in a config. pydantic only: registering the plugin
(``rlvr plugins``, ``rlvr validate``) reads this model without importing the reward itself.
"""

from __future__ import annotations

from pydantic import Field
from rlvr.plugin import Params


class __CLS__Params(Params):
    """The reward's params (``rewards[].params`` in a config); unknown keys are errors."""

    text: str = Field("</answer>", min_length=1, description="text the completion must contain")
    field: str | None = Field(
        None, description="dataset field whose value must appear instead of `text` (null: off)"
    )
    score: float = Field(1.0, description="score when the completion contains it")
    miss_score: float = Field(0.0, description="score when it does not")
