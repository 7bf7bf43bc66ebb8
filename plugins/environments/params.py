"""Params models of the built-in environments: light (pydantic only), imported at registration
and by ``rlvr validate``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from rlvr import Params, ReasoningGymConfig, create_host

#: The tools the ``tools`` environment has built in, by name.
BUILTIN_TOOLS = ("calculator",)


class SingleTurnParams(Params):
    """``single_turn``: no params; the episode is one completion of the dataset prompt."""


class ToolsParams(Params):
    """``tools``: the model may call the listed tools; an answer without a call ends it."""

    tools: list[Literal["calculator"]] = Field(
        ["calculator"],
        min_length=1,
        description="the built-in tools offered to the model (calculator: + - * / and "
        "parentheses on numbers)",
    )
    system_prompt: str | None = Field(
        None, description="a system message put first in every episode (after none in the row)"
    )
    max_calls_per_turn: int = Field(
        4, ge=1, description="most tool calls of one assistant message that are run"
    )


class ReasoningGymEnvParams(Params, ReasoningGymConfig):
    """``reasoning_gym``: a reasoning-gym task as the episodes' source and judge.

    The task's fields are ``data.reasoning_gym``'s (task, params, seed, train_size, eval_size,
    eval_share, template): the environment hands them to ``data:`` (one generator and one
    held-out split for both forms). ``scoring`` is the ``reasoning_gym`` reward's params.
    """

    feedback_turns: int = Field(
        0,
        ge=0,
        description="after a wrong answer, tell the model so and let it answer again, this "
        "many times (0: one answer per episode); needs environment.max_turns >= "
        "feedback_turns + 1. The score is the last answer's",
    )
    feedback: str = Field(
        "That is not right. Try again, and give your final answer in the same format.",
        min_length=1,
        description="the user message after a wrong answer (feedback_turns > 0)",
    )
    scoring: dict[str, Any] = Field(
        default_factory=dict,
        description="how the answer is read and scored: the params of the reasoning_gym "
        "reward, which scores it (strategies, lenient, correct, no_answer)",
    )

    @field_validator("scoring")
    @classmethod
    def _reward_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value:  # checked now, against the reward that will score (its params model)
            scoring_params(value)
        return value


#: The reward whose scoring the ``reasoning_gym`` environment uses (found by name, so one
#: plugin family never imports another's modules).
SCORING_REWARD = "reasoning_gym"


def scoring_reward() -> Any:
    """The registered ``reasoning_gym`` reward record."""
    return create_host().rewards[SCORING_REWARD]


def scoring_params(value: dict[str, Any]) -> Any:
    """``value`` validated as the ``reasoning_gym`` reward's params."""
    return scoring_reward().params.model_validate(value)


#: The named reward of the ``reasoning_gym`` environment (the task's score_answer).
SCORE_ANSWER = "score_answer"
#: The ``data.reasoning_gym`` keys of :class:`ReasoningGymEnvParams`.
TASK_FIELDS = tuple(ReasoningGymConfig.model_fields)


__all__ = [
    "BUILTIN_TOOLS",
    "ReasoningGymEnvParams",
    "SCORE_ANSWER",
    "SCORING_REWARD",
    "SingleTurnParams",
    "TASK_FIELDS",
    "ToolsParams",
    "scoring_params",
    "scoring_reward",
]
