"""rlvr's built-in rewards: ``format``, ``answer``, ``numbers``, ``arithmetic``, ``steps``,
``length_penalty``, ``callable``, ``reward_model``, ``reasoning_gym``.

Registered through the ``rlvr`` entry-point group like any third-party plugin, laid out as every
plugin family is: this module holds the hooks and one ``register(...)`` per reward; the params
models are in :mod:`rlvr.plugins.rewards.params`; each reward is a module of its own, named by
its ``LazyFactory`` and imported when a run builds the reward (``answer`` loads math-verify and
sympy), so importing this package costs only pydantic (and the standard library that the
``callable`` config check reads sources with).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from rlvr.plugin import LazyFactory, Reward, hookimpl
from rlvr.plugins.rewards.callable import check_function  # stdlib only: the config check
from rlvr.plugins.rewards.params import (
    AnswerParams,
    ArithmeticParams,
    CallableParams,
    FormatParams,
    LengthPenaltyParams,
    NumbersParams,
    ReasoningGymParams,
    RewardModelParams,
    StepsParams,
)


def _batch(params: CallableParams) -> Literal["call", "group"]:
    return "group" if params.batch == "group" else "call"


def _remote_code(params: RewardModelParams) -> str | None:
    return params.model if params.trust_remote_code else None


def _function(params: CallableParams) -> str:
    return params.function


def _gold_field(params: AnswerParams | NumbersParams | StepsParams) -> tuple[str, ...]:
    return (params.gold_field,)


def _reasoning_gym_fields(params: ReasoningGymParams) -> tuple[str, ...]:
    return ("task", "answer")


@hookimpl
def rlvr_register_rewards(register: Callable[[Reward], None]) -> None:
    register(
        Reward(
            name="format",
            params=FormatParams,
            factory=LazyFactory("rlvr.plugins.rewards.format:FormatReward"),
            description="Reasoning block then answer block, full match, exactly one of each tag.",
        )
    )
    register(
        Reward(
            name="answer",
            params=AnswerParams,
            factory=LazyFactory("rlvr.plugins.rewards.answer:AnswerReward"),
            description="Math correctness of the extracted answer (numeric, then math-verify).",
            fields=_gold_field,
            correctness=True,
        )
    )
    register(
        Reward(
            name="numbers",
            params=NumbersParams,
            factory=LazyFactory("rlvr.plugins.rewards.numbers:NumbersReward"),
            description="Fast numeric check: the first/last number of the answer equals the gold.",
            fields=_gold_field,
            correctness=True,
        )
    )
    register(
        Reward(
            name="reasoning_gym",
            params=ReasoningGymParams,
            factory=LazyFactory("rlvr.plugins.rewards.reasoning_gym:ReasoningGymReward"),
            description="A reasoning-gym task's own score_answer on the answer block (lenient: "
            "the last number counts too); rows from data.reasoning_gym. Needs "
            "rlvr[reasoning-gym].",
            fields=_reasoning_gym_fields,
            correctness=True,
        )
    )
    register(
        Reward(
            name="arithmetic",
            params=ArithmeticParams,
            factory=LazyFactory("rlvr.plugins.rewards.arithmetic:ArithmeticReward"),
            description="Every calculation written out (16 * 5 = 80) is right; arithmetic "
            "only, not reasoning (see docs/concepts/rewards.md before training on it).",
        )
    )
    register(
        Reward(
            name="steps",
            params=StepsParams,
            factory=LazyFactory("rlvr.plugins.rewards.steps:StepsReward"),
            description="Share of the reference solution's intermediate results (GSM8K's "
            "worked steps) that the completion's own right calculations reach.",
            fields=_gold_field,
        )
    )
    register(
        Reward(
            name="length_penalty",
            params=LengthPenaltyParams,
            factory=LazyFactory("rlvr.plugins.rewards.length_penalty:LengthPenaltyReward"),
            description="Token-length penalty: DAPO soft overlong punishment or a target length.",
        )
    )
    register(
        Reward(
            name="callable",
            params=CallableParams,
            factory=LazyFactory("rlvr.plugins.rewards.callable:CallableReward"),
            description="A TRL-style reward function (module:function or file.py:function); "
            "runs your own code.",
            runs_code=_function,
            batched=True,
            batch=_batch,
        )
    )
    register(
        Reward(
            name="reward_model",
            params=RewardModelParams,
            factory=LazyFactory("rlvr.plugins.rewards.reward_model:RewardModelReward"),
            description="A sequence-classification reward model's logits[:, 0] on prompt + "
            "completion (TRL's reward_funcs=['model']), batched on the trainer's device.",
            batched=True,
            in_process=True,
            remote_code=_remote_code,
        )
    )


@hookimpl
def rlvr_validate_config(config: Any) -> list[tuple[str, str]]:
    """Cheap checks of every ``callable`` reward: the module or file exists and defines the
    function. Nothing is imported or run here (a module's import may be slow or have side
    effects); the reward workers import it when they start."""
    problems = []
    for i, entry in enumerate(getattr(config, "rewards", None) or []):
        params = getattr(entry, "params", None)
        if getattr(entry, "name", None) != "callable" or not isinstance(params, CallableParams):
            continue
        problem = check_function(params.function)
        if problem:
            problems.append((f"rewards[{i}].params.function", problem))
    return problems


__all__ = ["rlvr_register_rewards", "rlvr_validate_config"]
