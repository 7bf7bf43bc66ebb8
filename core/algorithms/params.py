"""The params every policy-gradient algorithm shares (pydantic only: importing this never loads
torch).

Names follow TRL's ``GRPOConfig`` (``epsilon``, ``epsilon_high``, ``beta``, ``scale_rewards``,
``loss_type``, ``num_iterations``, ``mask_truncated_completions``, ``delta``) and, for PPO, TRL's
``PPOConfig`` (``cliprange``, ``cliprange_value``, ``vf_coef``, ``gamma``, ``lam``,
``kl_coef``, ``kl_estimator``, ``num_ppo_epochs``), accepted as aliases of the shared names.
GSPO's ``level`` also accepts TRL's ``importance_sampling_level``. Each model also answers
:meth:`requirements`, which config validation calls (no torch).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from rlvr.api.registration import Params, Requirements

#: TRL ``loss_type`` names -> ``rlvr.functional.aggregate`` modes.
LOSS_TYPES: dict[str, str] = {
    "grpo": "seq-mean-token-mean",
    "bnpo": "token-mean",
    "dapo": "token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
}
#: The loss aggregation modes of ``rlvr.functional.aggregate`` (``loss_type`` accepts them too).
AGGREGATION_MODES = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)

#: What ``loss_type`` accepts: TRL's names and the aggregation modes.
LossType = Literal[
    "grpo",
    "bnpo",
    "dapo",
    "dr_grpo",
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
]
#: What ``scale_rewards`` accepts: divide advantages by the group's std, the batch's, or not.
ScaleRewards = Literal["group", "batch", "none"]
#: What ``level`` accepts: an importance ratio per token, or one per sequence (GSPO).
PolicyLevel = Literal["token", "sequence"]


def _alias(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class _AliasedParams(Params):
    """Rejects a value given under two names (``epsilon`` and ``cliprange``) with a clear error."""

    @model_validator(mode="before")
    @classmethod
    def _one_name_per_field(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        for name, info in cls.model_fields.items():
            alias = info.validation_alias
            if isinstance(alias, AliasChoices):
                given = [str(c) for c in alias.choices if isinstance(c, str) and c in data]
                if len(given) > 1:
                    raise ValueError(
                        f"{' and '.join(given)} are the same setting ({name}); give only one"
                    )
        return data


class PolicyGradientParams(_AliasedParams):
    """Settings shared by every clipped policy-gradient algorithm."""

    #: the algorithm's name, for messages (not a field).
    algorithm: ClassVar[str] = "policy-gradient"
    #: group-based advantages need at least this many completions per prompt.
    min_group_size: ClassVar[int] = 2

    epsilon: float = Field(
        0.2,
        ge=0.0,
        description="Lower clip range: the ratio is clipped to [1 - epsilon, 1 + epsilon_high].",
    )
    epsilon_high: float | None = Field(
        None,
        ge=0.0,
        description="Upper clip range (DAPO Clip-Higher); null means equal to epsilon.",
    )
    delta: float | None = Field(
        None,
        validation_alias=_alias("delta", "dual_clip"),
        description=(
            "Dual clip: the loss of a negative-advantage token is capped at -A*delta "
            "(TRL's two-sided GRPO `delta`); must exceed 1 + epsilon_high. null: off."
        ),
    )
    beta: float = Field(
        0.0,
        ge=0.0,
        description="KL coefficient towards the reference model; 0 loads no reference model.",
    )
    kl_kind: Literal["k1", "k2", "k3"] = Field(
        "k3", description="KL estimator added to the per-token loss (k3: low variance)."
    )
    loss_type: LossType = Field(
        "grpo",
        description=(
            "Loss aggregation: grpo = seq-mean-token-mean, bnpo/dapo = token-mean, "
            "dr_grpo = seq-mean-token-sum-norm (divided by max_completion_length); the "
            "aggregation mode names are accepted too."
        ),
    )
    num_iterations: int = Field(
        1, ge=1, description="Optimizer passes over each generated batch (mu in the GRPO paper)."
    )
    mask_truncated_completions: bool = Field(
        False,
        description="Exclude completions cut at max_completion_length from the loss.",
    )
    importance_sampling_correction: bool = Field(
        False,
        validation_alias=_alias(
            "importance_sampling_correction", "vllm_importance_sampling_correction"
        ),
        description=(
            "Truncated importance sampling: weight each token's loss by "
            "min(pi_train / pi_sampler, importance_sampling_cap), correcting for the gap "
            "between the trainer's and the sampler's (vLLM's) log-probabilities. Needs a "
            "backend that returns log-probabilities."
        ),
    )
    importance_sampling_cap: float = Field(
        2.0,
        gt=0.0,
        validation_alias=_alias("importance_sampling_cap", "vllm_importance_sampling_cap"),
        description="Upper bound of the truncated importance weights.",
    )
    importance_sampling_mode: Literal["truncate", "mask"] = Field(
        "truncate",
        description=(
            "What the correction does with a token whose weight pi_train / pi_sampler is above "
            "importance_sampling_cap: 'truncate' keeps it at the cap (TIS), 'mask' leaves it "
            "out of the loss (MIS)."
        ),
    )
    level: PolicyLevel = Field(
        "token",
        validation_alias=_alias("level", "importance_sampling_level"),
        description=(
            "Importance ratio per 'token' (PPO, GRPO) or per 'sequence' (GSPO: the geometric "
            "mean of the sequence's token ratios, one clip decision per completion). TRL: "
            "importance_sampling_level."
        ),
    )

    @property
    def eps_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    @property
    def aggregation(self) -> str:
        """The ``rlvr.functional.aggregate`` mode of ``loss_type``."""
        return LOSS_TYPES.get(self.loss_type, self.loss_type)

    @model_validator(mode="after")
    def _check_delta(self) -> PolicyGradientParams:
        if self.delta is not None and self.level == "sequence":
            raise ValueError(
                "delta (dual clip) is not defined for level: sequence (GSPO clips whole "
                "sequences); set delta to null or level to token"
            )
        if self.delta is not None and self.delta <= 1.0 + self.eps_high:
            raise ValueError(
                f"delta (dual clip) must be greater than 1 + epsilon_high = {1 + self.eps_high:g} "
                f"(got {self.delta:g}); the dual-clip paper uses 3. Set it to null to disable."
            )
        return self

    def requirements(self) -> Requirements:
        return Requirements(
            reference_model=self.beta > 0,
            reference_model_param="beta",
            value_model=False,
            old_logprobs=self.num_iterations > 1,
            sampler_logprobs=self.importance_sampling_correction,
            min_group_size=self.min_group_size,
        )


class GroupParams(PolicyGradientParams):
    """Group-relative advantages (GRPO family)."""

    scale_rewards: ScaleRewards = Field(
        "group",
        description=(
            "Divide advantages by the group's reward std ('group'), the batch's ('batch') or "
            "not at all ('none'); true/false mean 'group'/'none' as in TRL."
        ),
    )

    @field_validator("scale_rewards", mode="before")
    @classmethod
    def _trl_bool(cls, value: Any) -> Any:
        if value is True:
            return "group"
        if value is False:
            return "none"
        return value


__all__ = [
    "AGGREGATION_MODES",
    "LOSS_TYPES",
    "GroupParams",
    "LossType",
    "PolicyGradientParams",
    "PolicyLevel",
    "ScaleRewards",
]
