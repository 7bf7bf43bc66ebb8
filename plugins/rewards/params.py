"""The params models of rlvr's built-in rewards: what ``rewards[i].params`` holds for each.

pydantic only (no math-verify, no sympy): registering the rewards reads these, and a reward's
module, with what it imports, loads when a run builds the reward.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from rlvr._builtin import ExtractionParams, Percent, code_spec
from rlvr.plugin import Params

# --------------------------------------------------------------------------- format


class FormatParams(Params):
    """Tags and scores of the ``format`` reward."""

    reasoning_start: str | None = Field(
        "<think>", description="opening reasoning tag (null with reasoning_end: no reasoning block)"
    )
    reasoning_end: str | None = Field("</think>", description="closing reasoning tag")
    answer_start: str = Field("<answer>", description="opening answer tag")
    answer_end: str = Field("</answer>", description="closing answer tag")
    prefilled_reasoning: bool = Field(
        False, description="the chat template already emitted reasoning_start: it is optional"
    )
    allow_text_between: bool = Field(
        False, description="allow text between the reasoning and answer blocks (else whitespace)"
    )
    pattern: str | None = Field(
        None,
        description="regex the whole stripped completion must match instead of the tag layout "
        "(re.fullmatch, DOTALL); no per-tag credit",
    )
    match_score: float = Field(1.0, description="score of a full match")
    tag_score: float = Field(0.0, description="added per tag that appears exactly once")
    tag_penalty: float = Field(0.0, description="added per tag that does not")

    @model_validator(mode="after")
    def _check_tags(self) -> FormatParams:
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as e:
                raise ValueError(f"pattern {self.pattern!r} is not a valid regex: {e}") from None
            if self.tag_score or self.tag_penalty:
                raise ValueError("tag_score and tag_penalty need the tag layout; unset pattern")
        if (self.reasoning_start is None) != (self.reasoning_end is None):
            raise ValueError("set both reasoning_start and reasoning_end, or neither")
        if self.prefilled_reasoning and self.reasoning_start is None:
            raise ValueError("prefilled_reasoning needs reasoning_start and reasoning_end")
        tags = self.tags()
        if any(not tag.strip() for tag in tags):
            raise ValueError("tags must be non-blank strings")
        for a in tags:
            for b in tags:
                if a is not b and a in b:
                    raise ValueError(f"tag {a!r} occurs inside tag {b!r}; tags must be distinct")
        return self

    @property
    def correct(self) -> float:
        """The score of a full match (every scored tag then appears once): the score at which
        a completion counts as format-compliant (``rlvr eval`` and in-training eval report the
        fraction that reach it), as ``correct`` is a correct answer's score for ``answer``."""
        return self.match_score + self.tag_score * len(self.scored_tags())

    def scored_tags(self) -> list[str]:
        """The tags that earn per-tag credit (a prefilled opening reasoning tag does not)."""
        return [
            t for t in self.tags() if not (self.prefilled_reasoning and t == self.reasoning_start)
        ]

    def tags(self) -> list[str]:
        """The tags in their expected order."""
        reasoning = [self.reasoning_start, self.reasoning_end] if self.reasoning_end else []
        return [*reasoning, self.answer_start, self.answer_end]  # type: ignore[list-item]


# --------------------------------------------------------------------------- answer


class CloseTier(Params):
    """Partial credit for a numeric answer within ``rel_tol`` (relative) of the gold."""

    rel_tol: float = Field(gt=0, description="relative tolerance, |pred - gold| / |gold|")
    score: float = Field(description="score of a wrong answer within rel_tol")


class AnswerParams(ExtractionParams):
    """Extraction, gold and scores of the ``answer`` reward."""

    gold_field: str = Field("answer", description="dataset field with the gold answer")
    correct: float = Field(1.0, description="score of a correct answer")
    wrong: float = Field(0.0, description="score of a wrong answer")
    no_answer: float = Field(0.0, description="score when no answer is found")
    stripped_match: float | None = Field(
        None, description="score of a correct answer with whitespace around it (null: correct)"
    )
    close: tuple[CloseTier, ...] = Field(
        (), description="partial credit for near misses: [{rel_tol, score}], tightest wins"
    )
    percent: Percent = Field("number", description="'50%' reads as 50 (number) or 0.5 (fraction)")
    timeout_seconds: int = Field(5, ge=1, description="math-verify timeout (whole seconds)")

    @field_validator("close")
    @classmethod
    def _distinct_tiers(cls, tiers: tuple[CloseTier, ...]) -> tuple[CloseTier, ...]:
        if len({t.rel_tol for t in tiers}) != len(tiers):
            raise ValueError("each close tier needs a different rel_tol")
        return tuple(sorted(tiers, key=lambda t: t.rel_tol))


# --------------------------------------------------------------------------- numbers


class NumbersParams(ExtractionParams):
    """Extraction, tolerances and scores of the ``numbers`` reward."""

    gold_field: str = Field("answer", description="dataset field with the gold answer")
    position: Literal["first", "last", "any"] = Field(
        "last",
        description="which number of the extracted answer is compared; any: right when one is",
    )
    tolerance: float = Field(1e-6, ge=0, description="absolute tolerance")
    rel_tolerance: float = Field(0.0, ge=0, description="relative tolerance (of |gold|)")
    correct: float = Field(1.0, description="score when the number equals the gold")
    wrong: float = Field(0.0, description="score when it does not")
    no_answer: float = Field(0.0, description="score when no answer or no number is found")
    percent: Percent = Field("number", description="'50%' reads as 50 (number) or 0.5 (fraction)")


# --------------------------------------------------------------------------- reasoning_gym


#: rlvr.rewards.extract.Strategy, which the public API does not export.
_Strategy = Literal["answer_tag", "boxed", "hash", "answer_is", "last_number"]


class ReasoningGymParams(ExtractionParams):
    """Extraction and scores of the ``reasoning_gym`` reward (the task's own score_answer)."""

    strategies: tuple[_Strategy, ...] = Field(
        ("answer_tag",),
        description="extraction strategies, tried in order (default: strict, the answer block "
        "only)",
    )
    lenient: bool = Field(
        False,
        description="the last number of the completion also counts: the score is the better "
        "of the extracted answer's and that number's",
    )
    correct: float = Field(
        1.0, description="score_answer's value of a right answer (rlvr eval's threshold)"
    )
    no_answer: float = Field(0.0, description="score when nothing is extracted")


# --------------------------------------------------------------------------- arithmetic


class ArithmeticParams(Params):
    """Scores of the ``arithmetic`` reward."""

    correct: float = Field(1.0, description="score when every calculation found is right")
    wrong: float = Field(0.0, description="score when any calculation is wrong")
    no_calculation: float = Field(0.0, description="score when the completion has none")


# --------------------------------------------------------------------------- steps


class StepsParams(Params):
    """Where the reference solution is."""

    gold_field: str = Field(
        "answer", description="dataset field with the worked reference solution"
    )


# --------------------------------------------------------------------------- length_penalty


_MODE_FIELDS = {"overlong": ("max_length", "buffer"), "target": ("target_length", "tolerance")}


class LengthPenaltyParams(Params):
    """Mode and shape of the ``length_penalty`` reward (lengths in tokens)."""

    mode: Literal["overlong", "target"] = Field(
        "overlong", description="overlong: DAPO soft overlong punishment; target: peak at a length"
    )
    max_length: int | None = Field(None, gt=0, description="overlong: -factor from here (tokens)")
    buffer: int | None = Field(
        None, gt=0, description="overlong: the penalty ramps over the last `buffer` tokens"
    )
    target_length: int | None = Field(None, ge=0, description="target: the best length (tokens)")
    tolerance: int | None = Field(
        None, gt=0, description="target: -factor at this many tokens from target_length"
    )
    shape: Literal["linear", "cosine"] = Field("linear", description="target: shape of the ramp")
    factor: float = Field(1.0, ge=0, description="size of the largest penalty")

    @model_validator(mode="after")
    def _check_mode(self) -> LengthPenaltyParams:
        needed = _MODE_FIELDS[self.mode]
        missing = [name for name in needed if getattr(self, name) is None]
        if missing:
            raise ValueError(f"mode {self.mode!r} needs {' and '.join(missing)}")
        # Fields of the other mode must stay unset (null), so a dumped config reloads as is.
        for mode, names in _MODE_FIELDS.items():
            for name in names:
                if mode != self.mode and getattr(self, name) is not None:
                    raise ValueError(f"{name} is used only by mode {mode!r}, not {self.mode!r}")
        if self.mode == "overlong" and self.shape != "linear":
            raise ValueError("shape is used only by mode 'target'")
        if self.mode == "overlong" and self.buffer >= self.max_length:  # type: ignore[operator]
            raise ValueError(
                f"buffer ({self.buffer}) must be smaller than max_length ({self.max_length}): "
                "the penalty ramps from max_length - buffer to max_length"
            )
        return self


# --------------------------------------------------------------------------- callable


#: Row fields TRL does not pass on as keyword arguments.
RESERVED = ("prompt", "completion", "completion_ids")


#: The keyword arguments TRL's call itself passes (a ``kwargs`` entry cannot replace them).
TRL_ARGUMENTS = (
    "prompts",
    "completions",
    "completion_ids",
    "trainer_state",
    "log_extra",
    "log_metric",
)


class CallableParams(Params):
    """Which TRL-style function to call, and how."""

    function: str = Field(
        description="'module:function' or 'path/to/file.py:function' (runs your own code)"
    )
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="extra keyword arguments passed on every call"
    )
    format: Literal["auto", "standard", "conversational"] = Field(
        "auto",
        description="TRL dataset format: auto = conversational when the row's prompt is a "
        "list of messages",
    )
    batch: Literal["step", "group"] = Field(
        "step",
        description="step: one call on every completion scored together (a step's on this "
        "rank, as TRL; an eval batch); group: one call per prompt's completions",
    )

    @field_validator("function")
    @classmethod
    def _check_function(cls, value: str, info: ValidationInfo) -> str:
        # a relative file against the config file's directory (see rlvr.config.schema)
        return code_spec(value, (info.context or {}).get("config_dir"))

    @field_validator("kwargs")
    @classmethod
    def _check_kwargs(cls, value: dict[str, Any]) -> dict[str, Any]:
        bad = [k for k in value if not k.isidentifier() or k in TRL_ARGUMENTS]
        if bad:
            raise ValueError(f"kwargs {bad} cannot be keyword arguments of the function")
        return value


# --------------------------------------------------------------------------- reward_model


def is_hub_id(value: str) -> bool:
    """Whether a ``model`` value reads as a hub id (``org/name``) rather than a path."""
    return value.count("/") == 1 and not value.startswith(("/", ".", "~"))


class RewardModelParams(Params):
    """Which sequence-classification reward model scores the completions, and how."""

    model: str = Field(
        description="a local model directory, or a hub id (org/name) where a hub is reachable"
    )
    batch_size: int = Field(16, ge=1, description="sequences per forward pass")
    device: str = Field(
        "auto", description="torch device; auto = the trainer's (cuda:LOCAL_RANK, else cpu)"
    )
    max_length: int | None = Field(
        None, ge=1, description="truncate prompt + completion to this many tokens (null: never)"
    )
    format: Literal["auto", "standard", "conversational"] = Field(
        "auto",
        description="TRL dataset format: auto = conversational (the reward tokenizer's chat "
        "template over prompt + completion messages) when the row's prompt is a list of messages",
    )
    trust_remote_code: bool = Field(
        False, description="run the model directory's own Python files (needs --trust-remote-code)"
    )

    @field_validator("model")
    @classmethod
    def _resolve(cls, value: str, info: ValidationInfo) -> str:
        value = value.strip()
        if not value:
            raise ValueError("name a model directory or hub id")
        path = Path(value).expanduser()
        if not path.is_absolute():  # against the config file's directory (see rlvr.config)
            path = Path((info.context or {}).get("config_dir") or Path.cwd()) / path
        if path.is_dir():
            return str(path)
        if is_hub_id(value):
            return value  # downloaded (or found in the hub cache) when the run builds it
        raise ValueError(f"no model directory {str(path)!r} (nor a hub id: org/name)")
