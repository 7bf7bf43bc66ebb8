"""The ``__NAME__`` algorithm plugin for rlvr.

A policy gradient with a group baseline (mean or median).

After ``pip install -e .`` use it in any rlvr config::

    algorithm:
      name: __NAME__
      params: {baseline: median}

The package is laid out as rlvr's own plugin families are: this module registers the plugin
(cheap on purpose, no torch: ``rlvr plugins`` and ``rlvr validate`` import it), ``params.py``
holds the params model, and ``algorithm.py`` the algorithm, which the ``LazyFactory`` below
imports only when a run builds it. The object it builds follows :class:`rlvr.plugin.AlgorithmImpl`;
``requirements(params)`` tells rlvr, before any model loads, what the algorithm needs (a
reference model, old log-probs, group size, ...).
"""

from __future__ import annotations

from rlvr.plugin import Algorithm, LazyFactory, Requirements, hookimpl

from __MODULE__.params import __CLS__Params

#: The algorithm ("module:attribute"), imported on the factory's first call (when a run builds it).
IMPLEMENTATION = "__MODULE__.algorithm:__CLS__"


def requirements(params: __CLS__Params) -> Requirements:
    """What a run must provide (checked by ``rlvr validate``; no torch)."""
    return params.requirements()


@hookimpl
def rlvr_register_algorithms(register):
    register(
        Algorithm(
            name="__NAME__",
            params=__CLS__Params,
            factory=LazyFactory(IMPLEMENTATION),
            description="policy gradient with a group mean or median baseline",
            requirements=requirements,
        )
    )
