"""The ``__NAME__`` environment plugin for rlvr.

The model answers the dataset row's question; a wrong answer is told so and may try again,
until it is right or out of tries. A right answer earns the environment's reward ``solved``.

After ``pip install -e .`` use it in any rlvr config::

    environment:
      name: __NAME__
      params: {tries: 3}
      max_turns: 3

An environment shapes an episode: ``start(row, prompt)`` returns the first messages, and
``respond(state, message)`` answers each assistant message with messages of its own, a
``done`` flag and named rewards (added to the episode's score, logged as
``rewards/<name>/mean``). rlvr renders, samples and tokenizes; the environment's messages are
read by the model but never trained on. Check it with::

    rlvr env check __NAME__

The package is laid out as rlvr's own plugin families are: this module registers the plugin
(cheap: ``rlvr plugins`` and ``rlvr validate`` import it), ``params.py`` holds the params model,
and ``environment.py`` the environment, which the ``LazyFactory`` below imports only when a run
builds it.
"""

from __future__ import annotations

from rlvr.plugin import Environment, LazyFactory, hookimpl

from __MODULE__.params import __CLS__Params

#: The environment ("module:attribute"), imported on the factory's first call.
IMPLEMENTATION = "__MODULE__.environment:__CLS__"


@hookimpl
def rlvr_register_environments(register):
    register(
        Environment(
            name="__NAME__",
            params=__CLS__Params,
            factory=LazyFactory(IMPLEMENTATION),
            description="answer the question; a wrong answer is told so and may try again",
        )
    )
