"""The params of the ``code_exec`` reward (pydantic only)."""

from __future__ import annotations

from pydantic import Field

from rlvr.plugin import Params


class CodeExecParams(Params):
    tests_field: str = Field("tests", min_length=1, description="row field with the test code")
    timeout_seconds: float = Field(5.0, gt=0, le=600, description="wall-clock limit")
    memory_mb: int = Field(512, ge=64, description="address-space limit of the program (MiB)")
    pass_score: float = Field(1.0, description="score when the program exits with status 0")
    fail_score: float = Field(0.0, description="score otherwise (or when there is no code)")
    python: str | None = Field(None, description="interpreter (default: the one running rlvr)")
