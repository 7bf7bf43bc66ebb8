"""A training step's line of ``metrics.jsonl``: what the rollout, the algorithm and the
updates measured, in the namespace :mod:`rlvr.outputs.metrics` documents (the sinks, the
console and the shared computations are beside it in :mod:`rlvr.outputs`; the step's numbers
are assembled here, where their types live)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlvr.outputs.metrics_compute import length_metrics, peak_memory_mb, reward_metrics
from rlvr.rewards.scoring import RewardStats
from rlvr.rollout.runner import Completion, Rollout
from rlvr.training.update import UpdateResult


def zero_std_frac(items: Sequence[Completion]) -> float:
    """Fraction of groups whose completions all scored the same (no learning signal)."""
    groups: dict[int, list[float]] = {}
    for c in items:
        groups.setdefault(c.group, []).append(c.score)
    if not groups:
        return 0.0
    flat = sum(1 for scores in groups.values() if max(scores) - min(scores) == 0)
    return flat / len(groups)


def step_metrics(
    *,
    step: int,
    algorithm: str,
    rollout: Rollout,
    prepare_metrics: Mapping[str, float],
    updates: Sequence[UpdateResult],
    learning_rate: float,
    num_tokens: int,
    step_time: float,
    training_time: float,
    cpu_time: float,
) -> dict[str, Any]:
    """A step's line of ``metrics.jsonl`` (the namespace in the module docstring).

    Update measurements are averaged over the step's ``num_iterations`` updates, except
    ``entropy`` and ``sampler/*``, measured before the first update changed any weight.
    """
    gen = rollout.generated
    first = updates[0]
    m: dict[str, Any] = {"step": step}
    # as TRL, a completion every reward left None is out of the reward's mean and std
    m.update(reward_metrics(_stats([c.score for c in gen if c.scored]), rollout.summary))
    # failed episodes have no score: a step of nothing else logs reward null, not 0.0
    m["zero_std_frac"] = zero_std_frac([c for c in gen if c.failed is None])
    m["groups_filtered"] = rollout.groups_filtered
    m["groups_kept"] = len({c.group for c in rollout.kept})
    m["generation_rounds"] = rollout.rounds
    if rollout.guides:  # training.guidance: how the rewards score the rows' own solutions
        m["guide/count"] = len(rollout.guides)
        m["guide/reward_mean"] = _mean([c.score for c in rollout.guides])
    m.update(length_metrics([len(c.token_ids) for c in gen], [c.truncated for c in gen]))
    m["loss"] = _mean([u.loss for u in updates])
    m["grad_norm"] = _mean([u.grad_norm for u in updates])
    if first.value_grad_norm is not None:
        m["value_grad_norm"] = _mean([u.value_grad_norm or 0.0 for u in updates])
    # None (null) when the update skipped every row (all inert): nothing was measured.
    m["entropy"] = first.entropy
    if first.sampler_gap_mean is not None:
        m["sampler/logp_gap_mean"] = first.sampler_gap_mean
        m["sampler/logp_gap_max"] = first.sampler_gap_max
    kls = [u.kl for u in updates if u.kl is not None]
    if kls:
        m["kl"] = _mean(kls)
    m["learning_rate"] = learning_rate
    m["inert_frac"] = first.inert_frac
    m["skipped"] = 0 if all(u.finite for u in updates) else 1
    m["num_tokens"] = num_tokens
    m["prompt_tokens"] = sum(len(c.prompt_ids) for c in rollout.kept)
    prefix = f"algo/{algorithm}/"
    for k, v in prepare_metrics.items():
        m[prefix + k] = float(v)
    loss_metrics: dict[str, list[float]] = {}
    for u in updates:
        for k, v in u.algo.items():
            loss_metrics.setdefault(k, []).append(v)
    for k, values in loss_metrics.items():
        m[prefix + k] = _mean(values)
    m["step_time"] = step_time
    m["generation_time"] = rollout.generation_time
    m["scoring_time"] = rollout.scoring_time
    m["training_time"] = training_time
    m["cpu_time"] = cpu_time
    m["tokens_per_second"] = sum(len(c.token_ids) for c in gen) / max(step_time, 1e-9)
    m["peak_memory_mb"] = peak_memory_mb()
    for key, values in rollout.logged.items():  # TRL's log_metric: averaged over the step
        if values:
            m[key] = _mean(values)
    return m


def _stats(values: Sequence[float]) -> Any:
    return RewardStats.of(values)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


__all__ = ["step_metrics", "zero_std_frac"]
