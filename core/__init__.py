"""rlvr: reinforcement learning of language models with verifiable rewards.

Plugins import :data:`hookimpl` to implement the hooks of :mod:`rlvr.hookspecs`.
"""

import pluggy

__version__ = "0.1.0"

#: The one marker every rlvr plugin (built-in or third-party) uses.
hookimpl = pluggy.HookimplMarker("rlvr")

__all__ = ["__version__", "hookimpl"]
