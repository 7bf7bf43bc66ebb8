"""Params models of the built-in algorithms (pydantic only: importing this never loads torch).

Each extends :class:`rlvr.plugin.PolicyGradientParams` (TRL's ``GRPOConfig`` names, accepted as
aliases) with its own defaults and knobs, and answers :meth:`requirements` for config validation.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import AliasChoices, Field, model_validator

from rlvr._builtin import ScaleRewards
from rlvr.plugin import GroupParams, LossType, Params, PolicyGradientParams, Requirements


class GRPOParams(GroupParams):
    """GRPO (DeepSeekMath): group-normalised advantages, per-sequence token mean, k3 KL."""

    algorithm: ClassVar[str] = "grpo"
    beta: float = Field(
        0.04,
        ge=0.0,
        description="KL coefficient towards the reference model; 0 loads no reference model.",
    )


class OverlongPenaltyParams(Params):
    """DAPO soft overlong punishment, added to the reward."""

    enabled: bool = Field(True, description="Apply the overlong penalty.")
    max_length: int | None = Field(
        None,
        gt=0,
        description="Length (tokens) with the full penalty; null: training.max_completion_length.",
    )
    buffer: int | None = Field(
        None,
        gt=0,
        description="Length of the linear ramp before max_length; null: 20% of max_length.",
    )
    factor: float = Field(1.0, ge=0.0, description="Penalty at max_length (reward - factor).")

    def resolve(self, max_completion_length: int) -> tuple[int, int]:
        """``(max_length, buffer)`` with the defaults filled in."""
        max_length = self.max_length or max_completion_length
        buffer = self.buffer or max(1, round(0.2 * max_length))
        return max_length, buffer


class DAPOParams(GroupParams):
    """DAPO: Clip-Higher, token-level loss, dynamic sampling, overlong shaping, no KL."""

    algorithm: ClassVar[str] = "dapo"
    epsilon_high: float | None = Field(
        0.28, ge=0.0, description="Upper clip range (Clip-Higher); null means equal to epsilon."
    )
    loss_type: LossType = Field("dapo", description="Loss aggregation (dapo = token-mean).")
    mask_truncated_completions: bool = Field(
        True, description="Overlong filtering: truncated completions get no loss."
    )
    dynamic_sampling: bool = Field(
        True,
        description="Drop groups whose filter_metric is equal for all members, and generate more.",
    )
    max_generation_rounds: int = Field(
        4, ge=1, description="Generation rounds allowed to fill a step under dynamic sampling."
    )
    filter_metric: str = Field(
        "reward",
        min_length=1,
        description="'reward' (the weighted score) or a reward's label, e.g. an accuracy reward.",
    )
    overlong_penalty: OverlongPenaltyParams = Field(
        default_factory=OverlongPenaltyParams,
        description="Soft overlong punishment added to the reward.",
    )


class DrGRPOParams(GroupParams):
    """Dr. GRPO: no std scaling, token sums divided by a constant length."""

    algorithm: ClassVar[str] = "dr_grpo"
    scale_rewards: ScaleRewards = Field(
        "none", description="Dr. GRPO removes the std division ('none')."
    )
    loss_type: LossType = Field(
        "dr_grpo", description="Loss aggregation (dr_grpo = seq-mean-token-sum-norm)."
    )


class RLOOParams(PolicyGradientParams):
    """RLOO: leave-one-out baseline, clipped surrogate, token-level loss."""

    algorithm: ClassVar[str] = "rloo"
    loss_type: LossType = Field("dapo", description="Loss aggregation (dapo = token-mean).")


class GSPOParams(GroupParams):
    """GSPO (Qwen team): GRPO with a sequence-level ratio and the paper's tiny clip range."""

    algorithm: ClassVar[str] = "gspo"
    epsilon: float = Field(
        3e-4, ge=0.0, description="Lower clip of the sequence ratio (paper: 3e-4)."
    )
    epsilon_high: float | None = Field(
        4e-4, ge=0.0, description="Upper clip of the sequence ratio (paper: 4e-4)."
    )
    # rlvr.functional.PolicyLevel's values, spelled out: importing rlvr.functional loads torch
    level: Literal["token", "sequence"] = Field(
        "sequence",
        validation_alias=AliasChoices("level", "importance_sampling_level"),
        description="'sequence' (GSPO); 'token' turns it back into GRPO with GSPO's clip.",
    )


class CISPOParams(GroupParams):
    """CISPO (MiniMax-M1): group advantages, clipped and detached importance weights on
    REINFORCE, token-level loss, no KL."""

    algorithm: ClassVar[str] = "cispo"
    epsilon: float = Field(
        1.0,
        ge=0.0,
        description=(
            "Lower bound of the weight, relative: 1 - epsilon. 1.0 (the paper): no lower bound."
        ),
    )
    epsilon_high: float | None = Field(
        None,
        ge=0.0,
        description=(
            "Upper bound of the weight, relative: 1 + epsilon_high (as verl); null: 0.28, or "
            "absolute_ratio_cap when that is set."
        ),
    )
    absolute_ratio_cap: float | None = Field(
        None,
        gt=1.0,
        description=(
            "TRL's CISPO epsilon_high: an absolute cap on the weight (TRL suggests 5.0) instead "
            "of 1 + epsilon_high; do not give both."
        ),
    )
    loss_type: LossType = Field("dapo", description="Loss aggregation (dapo = token-mean).")
    level: Literal["token"] = Field(
        "token",
        validation_alias=AliasChoices("level", "importance_sampling_level"),
        description="CISPO weights tokens ('token' only).",
    )

    @property
    def eps_high(self) -> float:
        if self.absolute_ratio_cap is not None:
            return self.absolute_ratio_cap - 1.0
        return 0.28 if self.epsilon_high is None else self.epsilon_high

    @model_validator(mode="after")
    def _check_cispo(self) -> CISPOParams:
        if self.absolute_ratio_cap is not None and self.epsilon_high is not None:
            raise ValueError(
                "epsilon_high (relative: the cap is 1 + epsilon_high) and absolute_ratio_cap "
                "(TRL's absolute cap) set the same bound; give only one"
            )
        if self.delta is not None:
            raise ValueError("cispo has no dual clip (it never drops a token); remove delta")
        return self


class ReinforcePPParams(PolicyGradientParams):
    """REINFORCE++: returns-to-go of the KL-shaped token rewards, whitened over the batch."""

    algorithm: ClassVar[str] = "reinforce_pp"
    min_group_size: ClassVar[int] = 1

    beta: float = Field(
        0.01,
        ge=0.0,
        validation_alias=AliasChoices("beta", "kl_coef", "init_kl_coef"),
        description=(
            "KL coefficient: beta * KL(policy, ref) is subtracted from each token reward "
            "(paper, OpenRLHF init_kl_coef); 0 loads no reference model."
        ),
    )
    kl_kind: Literal["k1", "k2", "k3"] = Field(
        "k1",
        validation_alias=AliasChoices("kl_kind", "kl_estimator"),
        description="KL estimator in the reward (paper and OpenRLHF: k1).",
    )
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="Discount of the returns-to-go.")
    loss_type: LossType = Field("dapo", description="Loss aggregation (dapo = token-mean).")

    def requirements(self) -> Requirements:
        return Requirements(
            reference_model=self.beta > 0,
            reference_model_param="beta",
            # the KL in the reward compares the sampling policy with the reference
            old_logprobs=self.num_iterations > 1 or self.beta > 0,
            sampler_logprobs=self.importance_sampling_correction,
            min_group_size=1,
        )


class ReinforcePPBaselineParams(PolicyGradientParams):
    """REINFORCE++-baseline: group-mean baseline, whitened over the batch, KL as a loss term."""

    algorithm: ClassVar[str] = "reinforce_pp_baseline"
    beta: float = Field(
        0.0,
        ge=0.0,
        validation_alias=AliasChoices("beta", "kl_coef", "init_kl_coef"),
        description=(
            "Coefficient of the KL loss term (OpenRLHF --use_kl_loss); 0 loads no reference."
        ),
    )
    kl_kind: Literal["k1", "k2", "k3"] = Field(
        "k2",
        validation_alias=AliasChoices("kl_kind", "kl_estimator"),
        description="KL estimator of the loss term (OpenRLHF recommends k2 here).",
    )
    loss_type: LossType = Field("dapo", description="Loss aggregation (dapo = token-mean).")


class ValueModelParams(Params):
    """How PPO builds its value model."""

    init: Literal["policy"] = Field(
        "policy", description="'policy': a copy of the policy's backbone plus a scalar head."
    )
    head_init_std: float = Field(
        0.0, ge=0.0, description="Std of the head's initial weights (0: zeros, values start at 0)."
    )


class PPOParams(PolicyGradientParams):
    """PPO: GAE on token rewards from a learned value model, KL in the reward."""

    algorithm: ClassVar[str] = "ppo"
    min_group_size: ClassVar[int] = 1

    epsilon: float = Field(
        0.2,
        ge=0.0,
        validation_alias=AliasChoices("epsilon", "cliprange"),
        description="Policy clip range (TRL PPOConfig: cliprange).",
    )
    beta: float = Field(
        0.05,
        ge=0.0,
        validation_alias=AliasChoices("beta", "kl_coef"),
        description="KL coefficient: beta * KL(policy, ref) is subtracted from each token reward.",
    )
    kl_kind: Literal["k1", "k2", "k3"] = Field(
        "k1",
        validation_alias=AliasChoices("kl_kind", "kl_estimator"),
        description="KL estimator in the reward (TRL: kl_estimator).",
    )
    loss_type: LossType = Field("dapo", description="Policy loss aggregation (token-mean).")
    num_iterations: int = Field(
        1,
        ge=1,
        validation_alias=AliasChoices("num_iterations", "num_ppo_epochs"),
        description="Optimizer passes over each generated batch (TRL: num_ppo_epochs).",
    )
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="Discount factor.")
    lam: float = Field(0.95, ge=0.0, le=1.0, description="GAE lambda.")
    cliprange_value: float = Field(
        0.2, gt=0.0, description="Value updates are clipped to old value +- cliprange_value."
    )
    vf_coef: float = Field(0.1, gt=0.0, description="Weight of the value loss.")
    value_learning_rate: float | None = Field(
        None,
        gt=0.0,
        allow_inf_nan=False,
        description="Learning rate of the value model; null: the policy's.",
    )
    whiten_advantages: bool = Field(
        True, description="Normalise GAE advantages to mean 0, std 1 over valid tokens."
    )
    value_model: ValueModelParams = Field(
        default_factory=ValueModelParams, description="How the value model is built."
    )

    def requirements(self) -> Requirements:
        return Requirements(
            reference_model=self.beta > 0,
            reference_model_param="beta",
            value_model=True,
            old_logprobs=True,
            sampler_logprobs=self.importance_sampling_correction,
            min_group_size=1,
        )


class VAPOParams(PPOParams):
    """VAPO: PPO with decoupled, length-adaptive GAE, Clip-Higher, token-mean, a positive-example
    NLL term, value pretraining, group sampling and optional dynamic sampling."""

    algorithm: ClassVar[str] = "vapo"
    min_group_size: ClassVar[int] = 2

    epsilon_high: float | None = Field(
        0.28, ge=0.0, description="Upper clip range (Clip-Higher, paper: 0.28)."
    )
    beta: float = Field(
        0.0,
        ge=0.0,
        validation_alias=AliasChoices("beta", "kl_coef"),
        description="KL coefficient in the reward (VAPO: 0, no reference model).",
    )
    lam: float = Field(
        0.95,
        ge=0.0,
        le=1.0,
        description="The policy's GAE lambda when length_adaptive_alpha is null.",
    )
    lam_critic: float = Field(
        1.0, ge=0.0, le=1.0, description="GAE lambda of the value targets (decoupled GAE: 1.0)."
    )
    length_adaptive_alpha: float | None = Field(
        0.05,
        gt=0.0,
        description=(
            "Length-adaptive GAE: the policy's lambda is 1 - 1/(alpha * length) per "
            "completion (paper: 0.05); null: the fixed lam."
        ),
    )
    positive_nll_coef: float = Field(
        0.1,
        ge=0.0,
        validation_alias=AliasChoices("positive_nll_coef", "mu"),
        description="Weight mu of the NLL loss on positive (correct) completions (paper: 0.1).",
    )
    positive_metric: str = Field(
        "reward",
        min_length=1,
        description="'reward' (the weighted score) or a reward label that marks correct answers.",
    )
    positive_threshold: float = Field(
        1.0, description="A completion is positive when its positive_metric is >= this."
    )
    value_warmup_steps: int = Field(
        50,
        ge=0,
        description="First steps that train only the value model (paper: 50); the policy waits.",
    )
    dynamic_sampling: bool = Field(
        False,
        description="DAPO's dynamic sampling: drop groups whose filter_metric is all equal.",
    )
    max_generation_rounds: int = Field(
        4, ge=1, description="Generation rounds allowed to fill a step under dynamic sampling."
    )
    filter_metric: str = Field(
        "reward",
        min_length=1,
        description="'reward' (the weighted score) or a reward's label, for dynamic sampling.",
    )

    def requirements(self) -> Requirements:
        return Requirements(
            reference_model=self.beta > 0,
            reference_model_param="beta",
            value_model=True,
            old_logprobs=self.num_iterations > 1 or self.beta > 0,
            sampler_logprobs=self.importance_sampling_correction,
            min_group_size=2,
        )


ALGORITHM_PARAMS: dict[str, type[PolicyGradientParams]] = {
    "grpo": GRPOParams,
    "dapo": DAPOParams,
    "dr_grpo": DrGRPOParams,
    "rloo": RLOOParams,
    "ppo": PPOParams,
    "gspo": GSPOParams,
    "cispo": CISPOParams,
    "reinforce_pp": ReinforcePPParams,
    "reinforce_pp_baseline": ReinforcePPBaselineParams,
    "vapo": VAPOParams,
}

__all__ = [
    "ALGORITHM_PARAMS",
    "CISPOParams",
    "DAPOParams",
    "DrGRPOParams",
    "GRPOParams",
    "GSPOParams",
    "OverlongPenaltyParams",
    "PPOParams",
    "RLOOParams",
    "ReinforcePPBaselineParams",
    "ReinforcePPParams",
    "VAPOParams",
    "ValueModelParams",
]
