"""rlvr: reinforcement learning of language models with verifiable rewards.

This module is rlvr's whole public API: what a plugin author needs (the hook marker, the records a
plugin registers, the runtime types its factories return or receive, the algorithm base class and
its params, the reward-extraction helpers, the episode protocol of environments and tool
calling, the log-probabilities of completions) and what a script needs (the installed plugins,
load a config, train, evaluate, score completions with the configured rewards).
``rlvr.functional`` (the pure math) and ``rlvr.testing`` (the plugin test kit) are the two
public submodules; every other module is internal and may change without notice.

Every name but :data:`hookimpl` resolves on first use (PEP 562), so a plugin module loads only
what it touches: ``from rlvr import hookimpl, Reward`` never loads torch, and the pytest plugin
``rlvr.testing`` costs nothing in a test session that does not use it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rlvr.api.hookspecs import hookimpl

__version__ = "0.1.0"

#: Each public name and the internal module that defines it.
_EXPORTS: dict[str, str] = {
    "AGGREGATION_MODES": "rlvr.algorithms.params",
    "LOSS_TYPES": "rlvr.algorithms.params",
    "GroupParams": "rlvr.algorithms.params",
    "LossType": "rlvr.algorithms.params",
    "PolicyGradientParams": "rlvr.algorithms.params",
    "PolicyLevel": "rlvr.algorithms.params",
    "ScaleRewards": "rlvr.algorithms.params",
    "ConfigWarning": "rlvr.api.errors",
    "RlvrError": "rlvr.api.errors",
    "TrainingError": "rlvr.api.errors",
    "Host": "rlvr.api.host",
    "create_host": "rlvr.api.host",
    "check_function": "rlvr.api.usercode",
    "code_spec": "rlvr.api.usercode",
    "load_function": "rlvr.api.usercode",
    "Algorithm": "rlvr.api.registration",
    "Backend": "rlvr.api.registration",
    "Callback": "rlvr.api.registration",
    "Capabilities": "rlvr.api.registration",
    "Environment": "rlvr.api.registration",
    "LazyFactory": "rlvr.api.registration",
    "Params": "rlvr.api.registration",
    "Requirements": "rlvr.api.registration",
    "Reward": "rlvr.api.registration",
    "RewardFn": "rlvr.api.registration",
    "BatchRewardFn": "rlvr.api.registration",
    "Sample": "rlvr.api.registration",
    "BatchOutput": "rlvr.api.runtime",
    "TrainerState": "rlvr.api.runtime",
    "AlgorithmImpl": "rlvr.api.runtime",
    "EnvironmentImpl": "rlvr.api.runtime",
    "EnvResponse": "rlvr.api.runtime",
    "EpisodeStart": "rlvr.api.runtime",
    "Message": "rlvr.api.runtime",
    "Generation": "rlvr.api.runtime",
    "Generator": "rlvr.api.runtime",
    "LossOutput": "rlvr.api.runtime",
    "RolloutBatch": "rlvr.api.runtime",
    "RunCallback": "rlvr.api.runtime",
    "RunControl": "rlvr.api.runtime",
    "RunInfo": "rlvr.api.runtime",
    "SamplingParams": "rlvr.api.runtime",
    "check_request": "rlvr.api.runtime",
    "ConfigError": "rlvr.config.schema",
    "ReasoningGymConfig": "rlvr.config.schema",
    "RunConfig": "rlvr.config.schema",
    "load_config": "rlvr.config.schema",
    "reasoning_gym_dataset": "rlvr.data.reasoning_gym",
    "calculations": "rlvr.rewards.calculations",
    "evaluate_arithmetic": "rlvr.rewards.calculations",
    "parse_tool_calls": "rlvr.rollout.tools",
    "tool_call_format": "rlvr.rollout.tools",
    "tool_schema": "rlvr.rollout.tools",
    "tool_arguments": "rlvr.rollout.tools",
    "tool_name": "rlvr.rollout.tools",
    "check_tool": "rlvr.rollout.tools",
    "link_holds": "rlvr.rewards.calculations",
    "results": "rlvr.rewards.calculations",
    "Extraction": "rlvr.rewards.extract",
    "ExtractionParams": "rlvr.rewards.extract",
    "Percent": "rlvr.rewards.extract",
    "answer_region": "rlvr.rewards.extract",
    "extract_answer": "rlvr.rewards.extract",
    "find_numbers": "rlvr.rewards.extract",
    "first_number": "rlvr.rewards.extract",
    "gold_from_gsm8k": "rlvr.rewards.extract",
    "gold_from_row": "rlvr.rewards.extract",
    "last_block": "rlvr.rewards.extract",
    "last_boxed": "rlvr.rewards.extract",
    "last_number": "rlvr.rewards.extract",
    "parse_number": "rlvr.rewards.extract",
    "row_field": "rlvr.rewards.extract",
    "strip_tags": "rlvr.rewards.extract",
    "call_trl_reward": "rlvr.compat.trl.reward_call",
    "call_trl_batch": "rlvr.compat.trl.reward_call",
    "trl_inputs": "rlvr.compat.trl.reward_call",
    "functional": "rlvr.functional",
    "PolicyGradient": "rlvr.algorithms.base",
    "GroupRelative": "rlvr.algorithms.base",
    "kl_shaped_token_rewards": "rlvr.algorithms.base",
    "last_token_rewards": "rlvr.algorithms.base",
    "metric_values": "rlvr.algorithms.base",
    "to_float": "rlvr.algorithms.base",
    "autocast": "rlvr.model.loading",
    "eos_token_ids": "rlvr.model.loading",
    "load_policy": "rlvr.model.loading",
    "completion_logprobs": "rlvr.model.logprobs",
    "hf_weights": "rlvr.model.weights",
    "is_peft": "rlvr.model.weights",
    "unwrap": "rlvr.model.weights",
    "build_tiny_model": "rlvr.model.tiny",
    "read_metrics": "rlvr.outputs.metrics",
    "Scorer": "rlvr.rewards.scoring",
    "Scores": "rlvr.rewards.scoring",
    "validate": "rlvr.runs",
    "train": "rlvr.runs",
    "evaluate": "rlvr.runs",
    "Trainer": "rlvr.runs",
}

if TYPE_CHECKING:
    from rlvr import functional
    from rlvr.algorithms.base import (
        GroupRelative,
        PolicyGradient,
        kl_shaped_token_rewards,
        last_token_rewards,
        metric_values,
        to_float,
    )
    from rlvr.algorithms.params import (
        AGGREGATION_MODES,
        LOSS_TYPES,
        GroupParams,
        LossType,
        PolicyGradientParams,
        PolicyLevel,
        ScaleRewards,
    )
    from rlvr.api.errors import ConfigWarning, RlvrError, TrainingError
    from rlvr.api.host import Host, create_host
    from rlvr.api.registration import (
        Algorithm,
        Backend,
        BatchRewardFn,
        Callback,
        Capabilities,
        Environment,
        LazyFactory,
        Params,
        Requirements,
        Reward,
        RewardFn,
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
        check_request,
    )
    from rlvr.api.usercode import check_function, code_spec, load_function
    from rlvr.compat.trl.reward_call import call_trl_batch, call_trl_reward, trl_inputs
    from rlvr.config.schema import ConfigError, ReasoningGymConfig, RunConfig, load_config
    from rlvr.data.reasoning_gym import reasoning_gym_dataset
    from rlvr.model.loading import autocast, eos_token_ids, load_policy
    from rlvr.model.logprobs import completion_logprobs
    from rlvr.model.tiny import build_tiny_model
    from rlvr.model.weights import hf_weights, is_peft, unwrap
    from rlvr.outputs.metrics import read_metrics
    from rlvr.rewards.calculations import (
        calculations,
        evaluate_arithmetic,
        link_holds,
        results,
    )
    from rlvr.rewards.extract import (
        Extraction,
        ExtractionParams,
        Percent,
        answer_region,
        extract_answer,
        find_numbers,
        first_number,
        gold_from_gsm8k,
        gold_from_row,
        last_block,
        last_boxed,
        last_number,
        parse_number,
        row_field,
        strip_tags,
    )
    from rlvr.rewards.scoring import Scorer, Scores
    from rlvr.rollout.tools import (
        check_tool,
        parse_tool_calls,
        tool_arguments,
        tool_call_format,
        tool_name,
        tool_schema,
    )
    from rlvr.runs import Trainer, evaluate, train, validate


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rlvr' has no attribute {name!r}")
    value = importlib.import_module(module)
    if name != "functional":
        value = getattr(value, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    # plugin hooks and what a plugin registers
    "hookimpl",
    "Reward",
    "Algorithm",
    "Backend",
    "Environment",
    "Params",
    "Requirements",
    "Callback",
    "Capabilities",
    "LazyFactory",
    "RewardFn",
    "BatchRewardFn",
    "Sample",
    "BatchOutput",
    "TrainerState",
    # what factories return and receive at run time
    "Generator",
    "Generation",
    "SamplingParams",
    "check_request",
    "AlgorithmImpl",
    "RolloutBatch",
    "LossOutput",
    "RunCallback",
    "RunControl",
    "RunInfo",
    # environments: the episode protocol and tool calling
    "EnvironmentImpl",
    "EpisodeStart",
    "EnvResponse",
    "Message",
    "tool_schema",
    "tool_arguments",
    "tool_name",
    "check_tool",
    "parse_tool_calls",
    "tool_call_format",
    "evaluate_arithmetic",
    # algorithms: the shared implementation, its params, the pure math
    "functional",
    "PolicyGradient",
    "GroupRelative",
    "PolicyGradientParams",
    "GroupParams",
    "LossType",
    "ScaleRewards",
    "PolicyLevel",
    "LOSS_TYPES",
    "AGGREGATION_MODES",
    "metric_values",
    "kl_shaped_token_rewards",
    "last_token_rewards",
    "to_float",
    # rewards: answer extraction and written calculations
    "Extraction",
    "ExtractionParams",
    "Percent",
    "extract_answer",
    "answer_region",
    "parse_number",
    "find_numbers",
    "first_number",
    "last_number",
    "last_block",
    "last_boxed",
    "strip_tags",
    "row_field",
    "gold_from_row",
    "gold_from_gsm8k",
    "reasoning_gym_dataset",
    "calculations",
    "link_holds",
    "results",
    "call_trl_reward",
    "call_trl_batch",
    "trl_inputs",
    # backends: the policy and its weights
    "load_policy",
    "eos_token_ids",
    "autocast",
    "completion_logprobs",
    "hf_weights",
    "unwrap",
    "is_peft",
    # scripts: the installed plugins, config, runs, outputs, scoring
    "Host",
    "create_host",
    "RunConfig",
    "load_config",
    "validate",
    "train",
    "evaluate",
    "Trainer",
    "read_metrics",
    "Scorer",
    "Scores",
    "build_tiny_model",
    # code a config names ("module:attr" or "file.py:attr"; runs only with --allow-code)
    "code_spec",
    "check_function",
    "load_function",
    # errors
    "RlvrError",
    "ConfigError",
    "ReasoningGymConfig",
    "ConfigWarning",
    "TrainingError",
    "__version__",
]
