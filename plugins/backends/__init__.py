"""rlvr's built-in rollout backends.

Registration must stay cheap: this module imports no torch, transformers or vLLM. Each backend's
params model lives in :mod:`rlvr.plugins.backends.params`; its generator lives in a module of its
own (``hf.py``, ...) that the factory below imports only when a run builds the generator.

Every factory is called as ``factory(params, run, model, tokenizer)`` and returns a
:class:`rlvr.api.runtime.Generator`. To add a backend: a params model, a module with the generator,
a lazy factory here, and one more ``register(...)`` call in :func:`rlvr_register_backends`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlvr import Backend, Capabilities, hookimpl
from rlvr.plugins.backends.params import HFParams, VLLMParams, vllm_available


def hf_generator(params: HFParams, run: Any, model: Any, tokenizer: Any) -> Any:
    """Build :class:`rlvr.plugins.backends.hf.HFGenerator` (imports torch/transformers now)."""
    from rlvr.plugins.backends.hf import HFGenerator

    return HFGenerator(params, run, model, tokenizer)


def vllm_generator(params: VLLMParams, run: Any, model: Any, tokenizer: Any) -> Any:
    """Build :class:`rlvr.plugins.backends.vllm.VLLMGenerator` (starts the engine)."""
    from rlvr.plugins.backends.vllm import VLLMGenerator

    return VLLMGenerator(params, run, model, tokenizer)


@hookimpl
def rlvr_register_backends(register: Callable[[Backend], None]) -> None:
    register(
        Backend(
            name="hf",
            params=HFParams,
            factory=hf_generator,
            description="transformers generate() on the training model",
            capabilities=Capabilities(sampler_logprobs=False, reference_logprobs=True),
        )
    )
    register(
        Backend(
            name="vllm",
            params=VLLMParams,
            factory=vllm_generator,
            description="colocated in-process vLLM engine, weights synced in place each step",
            capabilities=Capabilities(
                sampler_logprobs=True,
                reference_logprobs=True,
                samples_from_policy=False,
                schedules_batches=True,
            ),
            available=vllm_available,
        )
    )
