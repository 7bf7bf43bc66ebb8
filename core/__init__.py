"""rlvr: reinforcement learning of language models with verifiable rewards.

The public API comes in tiers, one per audience (docs/reference/api.md lists each):

- ``rlvr`` (this module), for scripts: load and validate a config, train, evaluate, read the
  metrics, score completions with the configured rewards, the installed plugins, the errors.
- :mod:`rlvr.plugin`, for plugin authors: the hook marker, the records a plugin registers, the
  runtime protocols its factories return or receive, the params bases, the helpers.
- :mod:`rlvr.functional` (the pure math) and :mod:`rlvr.testing` (the plugin test kit).

No name is in two tiers. Every other module is internal and may change without notice;
``rlvr._builtin`` holds what only the built-in plugins use (docs/concepts/architecture.md).
Every name resolves on first use (PEP 562), so ``import rlvr`` loads no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlvr._lazy import lazy_getattr

__version__ = "0.1.0"

#: Each public name and the internal module that defines it.
_EXPORTS: dict[str, str] = {
    "RlvrError": "rlvr.api.errors",
    "create_host": "rlvr.api.host",
    "ConfigError": "rlvr.config.schema",
    "load_config": "rlvr.config.schema",
    "RunConfig": "rlvr.config.schema",
    "load_policy": "rlvr.model.loading",
    "completion_logprobs": "rlvr.model.logprobs",
    "build_tiny_model": "rlvr.model.tiny",
    "read_metrics": "rlvr.outputs.metrics",
    "Scorer": "rlvr.rewards.scoring",
    "evaluate": "rlvr.runs",
    "train": "rlvr.runs",
    "Trainer": "rlvr.runs",
    "validate": "rlvr.runs",
}

if TYPE_CHECKING:
    from rlvr.api.errors import RlvrError
    from rlvr.api.host import create_host
    from rlvr.config.schema import ConfigError, RunConfig, load_config
    from rlvr.model.loading import load_policy
    from rlvr.model.logprobs import completion_logprobs
    from rlvr.model.tiny import build_tiny_model
    from rlvr.outputs.metrics import read_metrics
    from rlvr.rewards.scoring import Scorer
    from rlvr.runs import Trainer, evaluate, train, validate

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "__version__",
    "load_config",
    "RunConfig",
    "validate",
    "train",
    "evaluate",
    "Trainer",
    "read_metrics",
    "Scorer",
    "create_host",
    "build_tiny_model",
    "load_policy",
    "completion_logprobs",
    "RlvrError",
    "ConfigError",
]
