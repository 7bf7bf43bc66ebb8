"""rlvr's built-in rewards: ``format``, ``answer``, ``numbers``, ``arithmetic``, ``steps``,
``length_penalty``, ``callable``.

Registered through the ``rlvr`` entry-point group like any third-party plugin. Importing this
package is cheap: math-verify and sympy load only when an ``answer`` reward needs them.
"""

from __future__ import annotations

from collections.abc import Callable

from rlvr import Reward, hookimpl

from .answer import AnswerParams, AnswerReward
from .arithmetic import ArithmeticParams, ArithmeticReward
from .callable import CallableParams, CallableReward, validate_callable_config
from .format import FormatParams, FormatReward
from .length_penalty import LengthPenaltyParams, LengthPenaltyReward
from .numbers import NumbersParams, NumbersReward
from .steps import StepsParams, StepsReward


def _function(params: CallableParams) -> str:
    return params.function


def _gold_field(params: AnswerParams | NumbersParams | StepsParams) -> tuple[str, ...]:
    return (params.gold_field,)


@hookimpl
def rlvr_register_rewards(register: Callable[[Reward], None]) -> None:
    register(
        Reward(
            name="format",
            params=FormatParams,
            factory=FormatReward,
            description="Reasoning block then answer block, full match, exactly one of each tag.",
        )
    )
    register(
        Reward(
            name="answer",
            params=AnswerParams,
            factory=AnswerReward,
            description="Math correctness of the extracted answer (numeric, then math-verify).",
            fields=_gold_field,
            correctness=True,
        )
    )
    register(
        Reward(
            name="numbers",
            params=NumbersParams,
            factory=NumbersReward,
            description="Fast numeric check: the first/last number of the answer equals the gold.",
            fields=_gold_field,
            correctness=True,
        )
    )
    register(
        Reward(
            name="arithmetic",
            params=ArithmeticParams,
            factory=ArithmeticReward,
            description="Every calculation written out (16 * 5 = 80) is right; arithmetic "
            "only, not reasoning (see docs/concepts/rewards.md before training on it).",
        )
    )
    register(
        Reward(
            name="steps",
            params=StepsParams,
            factory=StepsReward,
            description="Share of the reference solution's intermediate results (GSM8K's "
            "worked steps) that the completion's own right calculations reach.",
            fields=_gold_field,
        )
    )
    register(
        Reward(
            name="length_penalty",
            params=LengthPenaltyParams,
            factory=LengthPenaltyReward,
            description="Token-length penalty: DAPO soft overlong punishment or a target length.",
        )
    )
    register(
        Reward(
            name="callable",
            params=CallableParams,
            factory=CallableReward,
            description="A TRL-style reward function (module:function or file.py:function); "
            "runs your own code.",
            runs_code=_function,
        )
    )


__all__ = [
    "AnswerParams",
    "AnswerReward",
    "ArithmeticParams",
    "ArithmeticReward",
    "CallableParams",
    "CallableReward",
    "FormatParams",
    "FormatReward",
    "LengthPenaltyParams",
    "LengthPenaltyReward",
    "NumbersParams",
    "NumbersReward",
    "StepsParams",
    "StepsReward",
    "rlvr_register_rewards",
    "validate_callable_config",
]
