"""The public API for plugin authors: what a reward, algorithm, backend, environment or callback
plugin imports. The hook marker, the records a plugin registers, the runtime protocols its
factories return or receive, the params bases, the helpers for answers and tool calls, and the
errors and warnings a plugin raises (a factory raises :class:`PluginError` to refuse a
configuration: the user sees its message as one ``error:`` line).

Scripts import :mod:`rlvr`; the pure math is :mod:`rlvr.functional`, the test kit
:mod:`rlvr.testing`. Names resolve on first use: ``from rlvr.plugin import hookimpl, Reward``
loads no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlvr._lazy import lazy_getattr
from rlvr.api.hookspecs import hookimpl

#: Each public name and the internal module that defines it.
_EXPORTS: dict[str, str] = {
    "metric_values": "rlvr.algorithms.base",
    "PolicyGradient": "rlvr.algorithms.base",
    "GroupParams": "rlvr.algorithms.params",
    "LossType": "rlvr.algorithms.params",
    "PolicyGradientParams": "rlvr.algorithms.params",
    "ConfigWarning": "rlvr.api.errors",
    "PluginError": "rlvr.api.host",
    "Algorithm": "rlvr.api.registration",
    "Backend": "rlvr.api.registration",
    "BatchRewardFn": "rlvr.api.registration",
    "Callback": "rlvr.api.registration",
    "DataSource": "rlvr.api.registration",
    "Capabilities": "rlvr.api.registration",
    "Environment": "rlvr.api.registration",
    "LazyFactory": "rlvr.api.registration",
    "Params": "rlvr.api.registration",
    "Requirements": "rlvr.api.registration",
    "Reward": "rlvr.api.registration",
    "Sample": "rlvr.api.registration",
    "AlgorithmImpl": "rlvr.api.runtime",
    "BatchOutput": "rlvr.api.runtime",
    "EnvironmentImpl": "rlvr.api.runtime",
    "EnvResponse": "rlvr.api.runtime",
    "EpisodeStart": "rlvr.api.runtime",
    "Generation": "rlvr.api.runtime",
    "Generator": "rlvr.api.runtime",
    "LossOutput": "rlvr.api.runtime",
    "Message": "rlvr.api.runtime",
    "RolloutBatch": "rlvr.api.runtime",
    "RunCallback": "rlvr.api.runtime",
    "RunControl": "rlvr.api.runtime",
    "RunInfo": "rlvr.api.runtime",
    "SamplingParams": "rlvr.api.runtime",
    "TrainerState": "rlvr.api.runtime",
    "autocast": "rlvr.model.loading",
    "eos_token_ids": "rlvr.model.loading",
    "gold_from_row": "rlvr.rewards.extract",
    "parse_tool_calls": "rlvr.rollout.tools",
    "tool_arguments": "rlvr.rollout.tools",
    "tool_schema": "rlvr.rollout.tools",
}

if TYPE_CHECKING:
    from rlvr.algorithms.base import PolicyGradient, metric_values
    from rlvr.algorithms.params import GroupParams, LossType, PolicyGradientParams
    from rlvr.api.errors import ConfigWarning
    from rlvr.api.host import PluginError
    from rlvr.api.registration import (
        Algorithm,
        Backend,
        BatchRewardFn,
        Callback,
        Capabilities,
        DataSource,
        Environment,
        LazyFactory,
        Params,
        Requirements,
        Reward,
        Sample,
    )
    from rlvr.api.runtime import (
        AlgorithmImpl,
        BatchOutput,
        EnvironmentImpl,
        EnvResponse,
        EpisodeStart,
        Generation,
        Generator,
        LossOutput,
        Message,
        RolloutBatch,
        RunCallback,
        RunControl,
        RunInfo,
        SamplingParams,
        TrainerState,
    )
    from rlvr.model.loading import autocast, eos_token_ids
    from rlvr.rewards.extract import gold_from_row
    from rlvr.rollout.tools import parse_tool_calls, tool_arguments, tool_schema

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "hookimpl",
    "Reward",
    "Algorithm",
    "Backend",
    "Environment",
    "Callback",
    "DataSource",
    "Params",
    "Requirements",
    "Capabilities",
    "LazyFactory",
    "BatchRewardFn",
    "Sample",
    "BatchOutput",
    "TrainerState",
    "Generator",
    "Generation",
    "SamplingParams",
    "AlgorithmImpl",
    "RolloutBatch",
    "LossOutput",
    "RunCallback",
    "RunControl",
    "RunInfo",
    "EnvironmentImpl",
    "EpisodeStart",
    "EnvResponse",
    "Message",
    "tool_schema",
    "tool_arguments",
    "parse_tool_calls",
    "PolicyGradient",
    "PolicyGradientParams",
    "GroupParams",
    "LossType",
    "metric_values",
    "gold_from_row",
    "eos_token_ids",
    "autocast",
    "PluginError",
    "ConfigWarning",
]
