"""A third-party rlvr algorithm: policy gradient with pass@k advantages.

The package has the layout of rlvr's own plugin families: this module registers the plugin
(no torch: ``rlvr plugins`` imports it), ``params.py`` holds the params model and ``algorithm.py``
the algorithm, imported by its ``LazyFactory`` when a run builds it.
"""

from __future__ import annotations

from rlvr.plugin import Algorithm, LazyFactory, Requirements, hookimpl
from rlvr_passk.params import PassAtKParams


def _requirements(params: PassAtKParams) -> Requirements:
    return params.requirements()


@hookimpl
def rlvr_register_algorithms(register):
    register(
        Algorithm(
            name="pass_at_k",
            params=PassAtKParams,
            factory=LazyFactory("rlvr_passk.algorithm:PassAtK"),
            description="pass@k advantages: credit a group for one right answer in k tries",
            requirements=_requirements,
        )
    )
