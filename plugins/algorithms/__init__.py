"""rlvr's built-in algorithms: grpo, dapo, dr_grpo, rloo, ppo, gspo, cispo, reinforce_pp,
reinforce_pp_baseline and vapo.

Laid out as every plugin family is: this module holds the hooks and one ``register(...)`` per
algorithm (from the :data:`ALGORITHMS` table); the params models are in
:mod:`rlvr.plugins.algorithms.params`; each implementation is a module of its own, named by its
``LazyFactory`` and imported when a run builds the algorithm. Registering them is cheap: this
module imports only the pydantic params models; torch and ``rlvr.functional`` load with an
implementation. All share one policy-gradient implementation
(:class:`rlvr.plugin.PolicyGradient`, :class:`rlvr.algorithms.base.GroupRelative`) and differ in
their params defaults, advantage estimator (``reinforce_pp``), surrogate (``cispo``), sample
selection and reward shaping (``dapo``) or value model (``ppo``, ``vapo``). The math is
``rlvr.functional``, documented in docs/algorithms.md.
"""

from __future__ import annotations

import warnings
from typing import Any

from rlvr.plugin import Algorithm, ConfigWarning, LazyFactory, PolicyGradientParams, hookimpl
from rlvr.plugins.algorithms.params import (
    ALGORITHM_PARAMS,
    CISPOParams,
    DAPOParams,
    DrGRPOParams,
    GRPOParams,
    GSPOParams,
    PPOParams,
    ReinforcePPBaselineParams,
    ReinforcePPParams,
    RLOOParams,
    VAPOParams,
)

_GROUP_RELATIVE = "rlvr._builtin:GroupRelative"  # the shared group-relative implementation

ALGORITHMS: tuple[tuple[str, type[PolicyGradientParams], str, str], ...] = (
    (
        "grpo",
        GRPOParams,
        _GROUP_RELATIVE,
        "GRPO: group-normalised advantages, clipped ratio, per-sequence token mean, k3 KL "
        "(beta 0.04)",
    ),
    (
        "dapo",
        DAPOParams,
        "rlvr.plugins.algorithms.dapo:DAPO",
        "DAPO: Clip-Higher (0.2/0.28), token-level loss, dynamic sampling, overlong penalty and "
        "truncation masking, no KL",
    ),
    (
        "dr_grpo",
        DrGRPOParams,
        _GROUP_RELATIVE,
        "Dr. GRPO: unscaled group advantages, token sums divided by max_completion_length",
    ),
    (
        "rloo",
        RLOOParams,
        "rlvr.plugins.algorithms.rloo:LeaveOneOut",
        "RLOO: leave-one-out baseline, clipped ratio, token-level loss",
    ),
    (
        "ppo",
        PPOParams,
        "rlvr.plugins.algorithms.ppo:PPO",
        "PPO: GAE from a learned value model (policy backbone + scalar head), KL in the reward",
    ),
    (
        "gspo",
        GSPOParams,
        _GROUP_RELATIVE,
        "GSPO: group advantages, one length-normalised ratio per sequence, clip 3e-4/4e-4, "
        "per-sequence token mean, no KL",
    ),
    (
        "cispo",
        CISPOParams,
        "rlvr.plugins.algorithms.cispo:CISPO",
        "CISPO: group advantages, REINFORCE weighted by the clipped, detached ratio (no token "
        "dropped), token-level loss, no KL",
    ),
    (
        "reinforce_pp",
        ReinforcePPParams,
        "rlvr.plugins.algorithms.reinforce_pp:ReinforcePP",
        "REINFORCE++: returns-to-go with k1 KL in the reward (beta 0.01), whitened over the "
        "batch, clipped ratio, token-level loss",
    ),
    (
        "reinforce_pp_baseline",
        ReinforcePPBaselineParams,
        "rlvr.plugins.algorithms.reinforce_pp:ReinforcePPBaseline",
        "REINFORCE++-baseline: group-mean baseline whitened over the batch, clipped ratio, "
        "token-level loss, optional KL loss term",
    ),
    (
        "vapo",
        VAPOParams,
        "rlvr.plugins.algorithms.vapo:VAPO",
        "VAPO: PPO with decoupled and length-adaptive GAE, Clip-Higher, token-level loss, "
        "positive-example NLL, value warm-up",
    ),
)


def _requirements(params: PolicyGradientParams) -> Any:
    return params.requirements()


@hookimpl
def rlvr_register_algorithms(register) -> None:
    for name, params, target, description in ALGORITHMS:
        register(
            Algorithm(
                name=name,
                params=params,
                factory=LazyFactory(target),
                description=description,
                requirements=_requirements,
            )
        )


@hookimpl
def rlvr_validate_config(config: Any) -> list[tuple[str, str]]:
    """Algorithm-specific cross-checks (the generic ones come from ``Requirements``)."""
    algorithm = getattr(config, "algorithm", None)
    name = getattr(algorithm, "name", None)
    params = getattr(algorithm, "params", None)
    expected = ALGORITHM_PARAMS.get(name)  # type: ignore[arg-type]
    if expected is None or not isinstance(params, expected):
        return []  # not ours (or a third-party algorithm of the same name)
    training = getattr(config, "training", None)
    max_completion = getattr(training, "max_completion_length", None)
    problems: list[tuple[str, str]] = []
    if isinstance(params, DAPOParams):
        problems += _check_dapo(params, max_completion, getattr(config, "rewards", None))
    if isinstance(params, PPOParams):
        problems += _check_ppo(params, training)
    if isinstance(params, VAPOParams):
        problems += _check_vapo(params, training, getattr(config, "rewards", None))
        if not problems:
            _warn_vapo_lambda(params, max_completion)
    return problems


def _check_dapo(
    params: DAPOParams, max_completion: int | None, rewards: Any
) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    overlong = params.overlong_penalty
    where = "algorithm.params.overlong_penalty"
    if overlong.enabled and isinstance(max_completion, int):
        if overlong.max_length is not None and overlong.max_length > max_completion:
            problems.append(
                (
                    f"{where}.max_length",
                    f"{overlong.max_length} exceeds training.max_completion_length "
                    f"({max_completion}), so completions never reach the full penalty; set it "
                    "<= training.max_completion_length or null (= max_completion_length)",
                )
            )
        else:
            max_length, buffer = overlong.resolve(max_completion)
            if buffer > max_length:
                problems.append(
                    (
                        f"{where}.buffer",
                        f"{buffer} is longer than the penalised length {max_length}; set "
                        f"buffer <= {max_length} (null: 20% of it)",
                    )
                )
    if params.dynamic_sampling:
        problems += _check_metric(params.filter_metric, "filter_metric", rewards)
    return problems


def _check_metric(metric: str, setting: str, rewards: Any) -> list[tuple[str, str]]:
    """A param naming a reward must name 'reward' or a reward label of the config."""
    if metric == "reward" or rewards is None:
        return []
    labels = _reward_labels(rewards)
    if labels is None or metric in labels:
        return []
    return [
        (
            f"algorithm.params.{setting}",
            f"{metric!r} is not a reward label of this config (labels: "
            f"{', '.join(labels) or 'none'}); use 'reward' (the weighted score) or one of them",
        )
    ]


def _check_vapo(params: VAPOParams, training: Any, rewards: Any) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if params.dynamic_sampling:
        problems += _check_metric(params.filter_metric, "filter_metric", rewards)
    if params.positive_nll_coef > 0:
        problems += _check_metric(params.positive_metric, "positive_metric", rewards)
    max_steps = getattr(training, "max_steps", None)
    if isinstance(max_steps, int) and 0 < max_steps <= params.value_warmup_steps:
        problems.append(
            (
                "algorithm.params.value_warmup_steps",
                f"{params.value_warmup_steps} warm-up steps leave none of training.max_steps "
                f"({max_steps}) to train the policy; lower value_warmup_steps (VAPO's paper: 50 "
                "of several thousand) or raise max_steps",
            )
        )
    return problems


#: ``alpha * max_completion_length`` at or below this leaves VAPO's length-adaptive lambda,
#: ``1 - 1/(alpha * length)``, at most 0.2 for every completion the run can generate.
VAPO_MIN_ALPHA_LENGTH = 1.25


def _warn_vapo_lambda(params: VAPOParams, max_completion: int | None) -> None:
    """One :class:`~rlvr.api.errors.ConfigWarning` when the paper's length-adaptive GAE (meant for
    completions of hundreds of tokens) would give every completion of this run a lambda near 0:
    the policy then learns from one-step TD errors only, and short answers collapse."""
    alpha = params.length_adaptive_alpha
    if alpha is None or not isinstance(max_completion, int):
        return
    if alpha * max_completion > VAPO_MIN_ALPHA_LENGTH:
        return
    best = max(0.0, 1.0 - 1.0 / (alpha * max_completion))
    warnings.warn(
        f"algorithm.params.length_adaptive_alpha: {alpha:g} x training.max_completion_length "
        f"{max_completion} gives VAPO's lambda = 1 - 1/(alpha * length) <= {best:.2g} for every "
        "completion, so the policy learns only from one-step TD errors and short answers can "
        "collapse; set length_adaptive_alpha: null (the fixed lam, 0.95) or a larger alpha, "
        f"e.g. {20.0 / max_completion:.3g} (lambda 0.95 at full length)",
        ConfigWarning,
        stacklevel=2,
    )


def _reward_labels(rewards: Any) -> list[str] | None:
    try:
        return [
            str(getattr(r, "key", None) or getattr(r, "label", None) or r.name) for r in rewards
        ]
    except (AttributeError, TypeError):
        return None


def _check_ppo(params: PPOParams, training: Any) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    lr = getattr(training, "learning_rate", None)
    if params.value_learning_rate is None and training is not None and lr is None:
        problems.append(
            (
                "algorithm.params.value_learning_rate",
                "ppo trains a value model and needs a learning rate for it; set "
                "algorithm.params.value_learning_rate (or training.learning_rate)",
            )
        )
    return problems


__all__ = [
    "ALGORITHMS",
    "rlvr_register_algorithms",
    "rlvr_validate_config",
]
