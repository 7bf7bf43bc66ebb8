"""What only the built-in plugins use: helpers that are not public API and may change with the
plugins that use them (docs/concepts/architecture.md, "What built-in plugins import").

A built-in plugin imports the public tiers (:mod:`rlvr`, :mod:`rlvr.plugin`,
:mod:`rlvr.functional`) and this module, never an internal module itself: the layer contract
keeps core's modules free to move. A helper lands here when a built-in needs it and no doc,
example or template does; once a third-party plugin needs it, it moves to :mod:`rlvr.plugin`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlvr._lazy import lazy_getattr

#: Each name and the internal module that defines it.
_EXPORTS: dict[str, str] = {
    "GroupRelative": "rlvr.algorithms.base",
    "kl_shaped_token_rewards": "rlvr.algorithms.base",
    "last_token_rewards": "rlvr.algorithms.base",
    "python_float": "rlvr.algorithms.base",
    "ScaleRewards": "rlvr.algorithms.params",
    "check_sampling_request": "rlvr.api.runtime",
    "check_function": "rlvr.api.usercode",
    "code_spec": "rlvr.api.usercode",
    "load_function": "rlvr.api.usercode",
    "ReasoningGymConfig": "rlvr.config.schema",
    "reasoning_gym_dataset": "rlvr.data.reasoning_gym",
    "reasoning_gym_rows": "rlvr.data.reasoning_gym",
    "adapter_weights": "rlvr.model.weights",
    "hf_weights": "rlvr.model.weights",
    "is_peft": "rlvr.model.weights",
    "unwrap_model": "rlvr.model.weights",
    "calculation_results": "rlvr.rewards.calculations",
    "evaluate_arithmetic": "rlvr.rewards.calculations",
    "link_holds": "rlvr.rewards.calculations",
    "written_calculations": "rlvr.rewards.calculations",
    "ExtractionParams": "rlvr.rewards.extract",
    "find_numbers": "rlvr.rewards.extract",
    "last_boxed": "rlvr.rewards.extract",
    "parse_number": "rlvr.rewards.extract",
    "Percent": "rlvr.rewards.extract",
    "row_field": "rlvr.rewards.extract",
    "strip_tags": "rlvr.rewards.extract",
    "tool_error": "rlvr.compat.trl.environment",
    "tool_message": "rlvr.compat.trl.environment",
    "tool_names": "rlvr.compat.trl.environment",
    "call_trl_batch": "rlvr.compat.trl.reward_call",
    "trl_inputs": "rlvr.compat.trl.reward_call",
    "check_tool": "rlvr.rollout.tools",
    "tool_name": "rlvr.rollout.tools",
}

if TYPE_CHECKING:
    from rlvr.algorithms.base import (
        GroupRelative,
        kl_shaped_token_rewards,
        last_token_rewards,
        python_float,
    )
    from rlvr.algorithms.params import ScaleRewards
    from rlvr.api.runtime import check_sampling_request
    from rlvr.api.usercode import check_function, code_spec, load_function
    from rlvr.compat.trl.environment import tool_error, tool_message, tool_names
    from rlvr.compat.trl.reward_call import call_trl_batch, trl_inputs
    from rlvr.config.schema import ReasoningGymConfig
    from rlvr.data.reasoning_gym import reasoning_gym_dataset, reasoning_gym_rows
    from rlvr.model.weights import adapter_weights, hf_weights, is_peft, unwrap_model
    from rlvr.rewards.calculations import (
        calculation_results,
        evaluate_arithmetic,
        link_holds,
        written_calculations,
    )
    from rlvr.rewards.extract import (
        ExtractionParams,
        Percent,
        find_numbers,
        last_boxed,
        parse_number,
        row_field,
        strip_tags,
    )
    from rlvr.rollout.tools import check_tool, tool_name

__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "ScaleRewards",
    "check_function",
    "code_spec",
    "load_function",
    "check_sampling_request",
    "ReasoningGymConfig",
    "reasoning_gym_dataset",
    "reasoning_gym_rows",
    "written_calculations",
    "evaluate_arithmetic",
    "tool_name",
    "check_tool",
    "link_holds",
    "calculation_results",
    "ExtractionParams",
    "Percent",
    "find_numbers",
    "last_boxed",
    "parse_number",
    "row_field",
    "strip_tags",
    "call_trl_batch",
    "tool_error",
    "tool_message",
    "tool_names",
    "trl_inputs",
    "GroupRelative",
    "kl_shaped_token_rewards",
    "last_token_rewards",
    "python_float",
    "adapter_weights",
    "hf_weights",
    "is_peft",
    "unwrap_model",
]
