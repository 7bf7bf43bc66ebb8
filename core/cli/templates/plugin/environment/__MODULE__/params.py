"""The params of the ``__NAME__`` environment.

What ``environment.params`` holds in a config. pydantic only: registering the plugin
(``rlvr plugins``, ``rlvr validate``) reads this model without importing the environment.
"""

from __future__ import annotations

from pydantic import Field
from rlvr.plugin import Params


class __CLS__Params(Params):
    """The environment's params (``environment.params`` in a config); unknown keys are errors."""

    tries: int = Field(3, ge=1, description="answers the model may give before the episode ends")
    field: str = Field("answer", min_length=1, description="dataset field with the right answer")
    feedback: str = Field(
        "That is not right; try again.", description="what a wrong answer is told"
    )
