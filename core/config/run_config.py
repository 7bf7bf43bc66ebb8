"""The whole run config (:class:`RunConfig`): the core sections and the plugin entries.

Each plugin entry's ``params`` is typed loosely here and validated on its own against that
plugin's params model (:mod:`rlvr.config.plugin_params`)."""

from __future__ import annotations

import math
from typing import Literal

import yaml
from pydantic import Field, ValidationInfo, field_validator

from rlvr.api.registration import REWARD_LIMIT, Params
from rlvr.config.sections import DataConfig, ModelConfig, PluginParams, Section, TrainingConfig

SECTIONS = (
    "model",
    "data",
    "rewards",
    "algorithm",
    "backend",
    "environment",
    "training",
    "callbacks",
)
DEFAULT_ALGORITHM = "grpo"
DEFAULT_BACKEND = "hf"
DEFAULT_ENVIRONMENT = "single_turn"


class PluginEntry(Section):
    """An ``algorithm:`` or ``backend:`` entry: a plugin name and that plugin's params."""

    name: str = Field(description="the plugin's registered name (rlvr plugins lists them)")
    params: PluginParams = Field(
        default_factory=Params,
        description="the plugin's own params, validated against its params model",
    )


class RewardEntry(PluginEntry):
    """One ``rewards[]`` entry: the reward plugin, its params, and how it counts."""

    label: str | None = Field(None, description="name in logs (default: the reward's name)")
    weight: float = Field(1.0, description="weight in the summed reward")
    timeout: float = Field(
        10.0,
        gt=0,
        description="seconds per call before the fallback (a batched reward's one call on "
        "its whole batch included)",
    )
    fallback: float = Field(0.0, description="value of a call that times out or crashes")
    on_error: Literal["fallback", "raise"] = Field(
        "fallback", description="a call that raises: use the fallback, or stop the run"
    )
    scope: Literal["answer", "transcript"] | None = Field(
        None,
        description="what it scores of a multi-turn episode: answer (the last assistant "
        "message) or transcript (every turn, sampled and environment's); null: the reward's "
        "own default (answer for the built-in rewards)",
    )
    correctness: bool = Field(
        False,
        description="this reward decides whether a completion is correct when evaluating "
        "(accuracy, pass@k); at most one entry. Unmarked: the first reward whose plugin checks "
        "answers (answer, numbers), see rlvr.evaluation.correctness",
    )

    @field_validator("weight", "fallback")
    @classmethod
    def _sane(cls, value: float, info: ValidationInfo) -> float:
        # Every step sums weight x value over the rewards: a NaN there (or an overflow to inf)
        # makes every advantage NaN, so the run could only skip steps until max_bad_steps.
        if not math.isfinite(value) or abs(value) > REWARD_LIMIT:
            raise ValueError(
                f"{value!r} is not a usable {info.field_name}: it must be a finite number "
                f"between -{REWARD_LIMIT:g} and {REWARD_LIMIT:g} (rewards score about -1..1, "
                "so weights and fallbacks are small numbers too)"
            )
        return value

    @property
    def key(self) -> str:
        return self.label or self.name


class EnvironmentEntry(PluginEntry):
    """The ``environment:`` entry: the environment plugin, its params, and the limits rlvr
    puts on its episodes (the same for every environment, so they are not its params)."""

    max_turns: int = Field(4, ge=1, description="most assistant turns in one episode")
    max_episode_tokens: int | None = Field(
        None,
        ge=1,
        description="most completion tokens of an episode, sampled and environment's together "
        "(null: max_turns x training.max_completion_length); an episode past it is truncated",
    )
    turn_timeout: float = Field(
        30.0, gt=0, description="seconds one environment call may take before its episode fails"
    )
    episode_timeout: float = Field(
        300.0, gt=0, description="seconds of environment calls one episode may take in all"
    )
    tool_call_format: Literal["auto", "hermes", "none"] = Field(
        "auto",
        description="how tool calls are read from the model's text: hermes (<tool_call>{json}"
        "</tool_call>, Qwen/Hermes), none, or auto (hermes when the chat template writes "
        "<tool_call>)",
    )
    reward_weights: dict[str, float] = Field(
        default_factory=dict,
        description="weight of each named reward the environment returns, in the episode's "
        "score (a name not listed: 1.0; 0: logged only); each is logged as rewards/<name>",
    )

    @field_validator("reward_weights")
    @classmethod
    def _sane_weights(cls, value: dict[str, float]) -> dict[str, float]:
        for name, weight in value.items():
            if not math.isfinite(weight) or abs(weight) > REWARD_LIMIT:
                raise ValueError(
                    f"{weight!r} is not a usable weight for {name!r}: it must be a finite "
                    f"number between -{REWARD_LIMIT:g} and {REWARD_LIMIT:g}"
                )
        return value


class RunConfig(Section):
    """A whole run config. Sections a command does not need may be absent (None)."""

    model: ModelConfig | None = Field(None, description="the policy to train or evaluate")
    data: DataConfig | None = Field(None, description="the prompts and the fields rewards read")
    rewards: list[RewardEntry] = Field(
        default_factory=list, description="reward plugins, summed with their weights"
    )
    algorithm: PluginEntry | None = Field(
        None, description="the algorithm plugin (train and validate default to grpo)"
    )
    backend: PluginEntry | None = Field(
        None, description="the generation backend plugin (train and validate default to hf)"
    )
    environment: EnvironmentEntry | None = Field(
        None,
        description="the environment plugin episodes run in (train and validate default to "
        "single_turn: one completion per prompt)",
    )
    training: TrainingConfig = Field(
        default_factory=TrainingConfig, description="optimisation, sampling, logging, faults"
    )
    callbacks: list[PluginEntry] = Field(
        default_factory=list,
        description="callback plugins that observe the run (and may stop it), in order: "
        "entries {name, params}, or just the name (rlvr plugins lists them)",
    )


def dump(config: RunConfig) -> str:
    """The resolved config (defaults filled in) as YAML. A ``data:`` section without
    ``source`` (a shorthand's, or rows from memory) is written without ``source`` and
    ``params``, as before data sources: a checkpoint's saved config then compares equal on
    ``--resume``."""
    data = config.model_dump(mode="json", exclude_none=False)
    section = data.get("data")
    if isinstance(section, dict) and section.get("source") is None:
        del section["source"], section["params"]
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
