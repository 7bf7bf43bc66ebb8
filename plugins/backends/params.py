"""Params models of the built-in backends: light (pydantic only), imported at registration."""

from __future__ import annotations

from pydantic import Field

from rlvr.records import Params


class HFParams(Params):
    """``hf``: sample with transformers ``generate()`` on the training model itself."""

    batch_size: int | None = Field(
        None, ge=1, description="most sequences per generate() call (None: all at once)"
    )
    use_cache: bool = Field(True, description="use the KV cache while generating")


__all__ = ["HFParams"]
