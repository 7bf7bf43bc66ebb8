"""The ``__NAME__`` backend plugin for rlvr.

It samples with the training model, token by token.

After ``pip install -e .`` use it in any rlvr config::

    backend:
      name: __NAME__
      params: {chunk_size: 16}

The trainer builds the generator with ``factory(params, run, model, tokenizer)`` (``run`` is
an :class:`rlvr.plugin.RunInfo`) and calls ``generate(prompts, n, sampling)`` for token-id prompts;
it returns an :class:`rlvr.plugin.Generation` (completion ``i`` belongs to prompt ``i // n``).

The package is laid out as rlvr's own plugin families are: this module registers the plugin
(cheap on purpose, no torch: ``rlvr plugins`` and ``rlvr validate`` import it), ``params.py``
holds the params model, and ``generator.py`` the generator, which the ``LazyFactory`` below
imports only when a run builds it.
"""

from __future__ import annotations

from rlvr.plugin import Backend, Capabilities, LazyFactory, hookimpl

from __MODULE__.params import __CLS__Params

#: The backend ("module:attribute"), imported on the factory's first call (when a run builds it).
IMPLEMENTATION = "__MODULE__.generator:__CLS__Generator"


def available() -> str | None:
    """None when the backend can run here, else what is missing (``rlvr validate`` says it)."""
    return None


@hookimpl
def rlvr_register_backends(register):
    register(
        Backend(
            name="__NAME__",
            params=__CLS__Params,
            factory=LazyFactory(IMPLEMENTATION),
            description="token-by-token sampling with the training model (no KV cache)",
            # No sampler log-probs are returned; the trainer can compute reference log-probs.
            capabilities=Capabilities(sampler_logprobs=False, reference_logprobs=True),
            available=available,
        )
    )
