"""The params of the ``__NAME__`` backend.

What ``backend.params`` holds in a config. pydantic only (no torch): registering the
plugin and ``rlvr validate`` read this model without importing the generator.
"""

from __future__ import annotations

from pydantic import Field
from rlvr.plugin import Params


class __CLS__Params(Params):
    """The backend's params (``backend.params`` in a config); unknown keys are errors."""

    chunk_size: int | None = Field(
        None, ge=1, description="most sequences per forward pass (null: all at once)"
    )
