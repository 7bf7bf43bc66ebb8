"""The ``__NAME__`` backend plugin for rlvr.

It samples with the training model, token by token.

After ``pip install -e .`` use it in any rlvr config::

    backend:
      name: __NAME__
      params: {chunk_size: 16}

The trainer builds the generator with ``factory(params, run, model, tokenizer)`` (``run`` is
an :class:`rlvr.api.runtime.RunInfo`) and calls ``generate(prompts, n, sampling)`` for token-id
prompts; it returns an :class:`rlvr.api.runtime.Generation` (completion ``i`` belongs to prompt
``i // n``). Registration is cheap on purpose (no torch here): the generator lives in
the ``generator`` module next to this one, imported by the factory.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from rlvr import Backend, Capabilities, Generator, Params, RunInfo, hookimpl


class __CLS__Params(Params):
    """The backend's params (``backend.params`` in a config); unknown keys are errors."""

    chunk_size: int | None = Field(
        None, ge=1, description="most sequences per forward pass (null: all at once)"
    )


def build(
    params: __CLS__Params,
    run: RunInfo,
    model: Any,
    tokenizer: Any,
) -> Generator:
    """The factory: imports torch and the generator only now."""
    from .generator import __CLS__Generator

    return __CLS__Generator(params, run, model, tokenizer)


def available() -> str | None:
    """None when the backend can run here, else what is missing (``rlvr validate`` says it)."""
    return None


@hookimpl
def rlvr_register_backends(register):
    register(
        Backend(
            name="__NAME__",
            params=__CLS__Params,
            factory=build,
            description="token-by-token sampling with the training model (no KV cache)",
            # No sampler log-probs are returned; the trainer can compute reference log-probs.
            capabilities=Capabilities(sampler_logprobs=False, reference_logprobs=True),
            available=available,
        )
    )
