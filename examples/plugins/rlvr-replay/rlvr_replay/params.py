"""The params of the ``replay`` backend (pydantic only)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlvr.plugin import Params


class ReplayParams(Params):
    path: str = Field(description="JSONL file, one completion per line")
    match: Literal["order", "prompt"] = Field(
        "order", description="order: rows in turn; prompt: rows whose prompt matches"
    )
    completion_field: str = Field("completion", description="field with the completion text")
    prompt_field: str = Field("prompt", description="field with the prompt (match: prompt)")
