"""The params of the ``keywords`` reward (pydantic only)."""

from __future__ import annotations

from pydantic import Field

from rlvr.plugin import Params


class KeywordParams(Params):
    required: list[str] = Field(default_factory=list, description="words that earn credit")
    banned: list[str] = Field(default_factory=list, description="words that cost `penalty`")
    penalty: float = 1.0
    case_sensitive: bool = False
