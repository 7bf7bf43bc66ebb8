"""The ``__NAME__`` reward plugin for rlvr.

Does the completion contain a given text?

After ``pip install -e .`` use it in any rlvr config::

    rewards:
      - name: __NAME__
        params: {text: "</answer>", score: 1.0}

A reward is a picklable callable built once per reward worker process by ``factory(params)``
and called once per completion with an :class:`rlvr.plugin.Sample`: ``completion``,
``prompt``, ``row`` (every field of the dataset row) and ``num_tokens``. It returns a float, or
None when it does not apply to the sample (counted as 0 in the weighted sum and left out of
this reward's mean). A call that raises or runs past the entry's ``timeout`` yields the
entry's ``fallback`` value; the run goes on.

The package is laid out as rlvr's own plugin families are: this module registers the plugin
(cheap: ``rlvr plugins`` and ``rlvr validate`` import it), ``params.py`` holds the params model,
and ``reward.py`` the reward, which the ``LazyFactory`` below imports only when a run builds it.
"""

from __future__ import annotations

from rlvr.plugin import LazyFactory, Reward, hookimpl

from __MODULE__.params import __CLS__Params

#: The reward ("module:attribute"), imported on the factory's first call (in each reward worker).
IMPLEMENTATION = "__MODULE__.reward:__CLS__"


def _fields(params: __CLS__Params) -> tuple[str, ...]:
    """The dataset fields the reward reads: rlvr checks a dataset has them before training."""
    return (params.field,) if params.field else ()


@hookimpl
def rlvr_register_rewards(register):
    register(
        Reward(
            name="__NAME__",
            params=__CLS__Params,
            factory=LazyFactory(IMPLEMENTATION),
            description="score when the completion contains a text (or a dataset field)",
            fields=_fields,
        )
    )
