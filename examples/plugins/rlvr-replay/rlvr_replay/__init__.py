"""A third-party rlvr backend: replay completions from a JSONL file.

Registration imports nothing heavy; the generator lives in :mod:`rlvr_replay.generator`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from rlvr import Backend, Capabilities, Params, hookimpl


class ReplayParams(Params):
    path: str = Field(description="JSONL file, one completion per line")
    match: Literal["order", "prompt"] = Field(
        "order", description="order: rows in turn; prompt: rows whose prompt matches"
    )
    completion_field: str = Field("completion", description="field with the completion text")
    prompt_field: str = Field("prompt", description="field with the prompt (match: prompt)")


def build(params: ReplayParams, run: Any, model: Any, tokenizer: Any) -> Any:
    from rlvr_replay.generator import ReplayGenerator

    return ReplayGenerator(params, run, model, tokenizer)


@hookimpl
def rlvr_register_backends(register):
    register(
        Backend(
            name="replay",
            params=ReplayParams,
            factory=build,
            description="completions replayed from a JSONL file (offline runs, debugging)",
            capabilities=Capabilities(sampler_logprobs=False, reference_logprobs=True),
        )
    )


@hookimpl
def rlvr_validate_config(config):
    backend = getattr(config, "backend", None)
    params = getattr(backend, "params", None)
    if getattr(backend, "name", None) != "replay" or not isinstance(params, ReplayParams):
        return []
    if not Path(params.path).is_file():
        return [("backend.params.path", f"no such file: {params.path!r}")]
    return []
