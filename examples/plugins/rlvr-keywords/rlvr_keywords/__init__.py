"""A third-party rlvr reward: the fraction of required keywords present, minus banned ones.

Install it (``pip install .``) and use it by name::

    rewards:
      - name: keywords
        params: {required: [total, answer], banned: [sorry]}

The package has the layout of rlvr's own plugin families: this module registers the plugin
(cheap: ``rlvr plugins`` imports it), ``params.py`` holds the params model and ``reward.py``
the reward, imported by its ``LazyFactory`` when a run builds it.
"""

from __future__ import annotations

from rlvr.plugin import LazyFactory, Reward, hookimpl
from rlvr_keywords.params import KeywordParams


@hookimpl
def rlvr_register_rewards(register):
    register(
        Reward(
            name="keywords",
            params=KeywordParams,
            factory=LazyFactory("rlvr_keywords.reward:KeywordReward"),
            description="share of required keywords present, minus a penalty for banned ones",
        )
    )
