"""A training step's rollout: generate completions for prompts, score them, and keep the groups
the algorithm selects. ``rlvr train`` and ``rlvr eval`` share the sampling and scoring
(:mod:`rlvr.rollout.sampling`) and the completions' records (:mod:`rlvr.rollout.completions`);
:class:`RolloutRunner` adds the training step's dynamic-sampling rounds, and the batch the
algorithm selects on (:mod:`rlvr.rollout.batch`).

One training rollout (:meth:`RolloutRunner.run`): take the step's prompts, sample
``num_generations`` completions each, score them (one reward pool for the whole run); when the
algorithm's ``select`` filters groups out (dynamic sampling), generate more with new prompts
until the step has its prompts' worth of groups or ``max_generation_rounds`` rounds ran.
Every round gets its own sampling seed from ``(seed, step, round)`` (:func:`step_seed`).

Under data parallelism (:mod:`rlvr.parallel.distributed`) ``target`` counts the whole step's
prompts: every rank takes the same prompts from its copy of the sampler and generates for its
slice, and the rounds stop on the global count of kept groups, so every rank runs the same rounds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rlvr.api.errors import RlvrError
from rlvr.api.runtime import Generator, RolloutBatch, SamplingParams, TrainerState
from rlvr.config.schema import TrainingConfig
from rlvr.data.prompts import PromptSampler, PromptSet
from rlvr.parallel.distributed import Dist
from rlvr.rewards.failures import RewardErrorLog
from rlvr.rewards.scoring import RewardStats, Scorer, merge_summaries
from rlvr.rollout.batch import build_batch
from rlvr.rollout.completions import Completion, sample_record
from rlvr.rollout.episodes import EpisodeRunner
from rlvr.rollout.guidance import Guides
from rlvr.rollout.sampling import ScoredSamples, sample_and_score

logger = logging.getLogger("rlvr.rollout.runner")


def logged_metric(label: str, name: str) -> str:
    """The metric a reward's ``log_metric(name, value)`` logs to (averaged per step)."""
    return f"rewards/{label}/metric/{name}"


def step_seed(seed: int, step: int, round_: int = 0, rank: int = 0) -> int:
    """A 31-bit seed fixed by ``(seed, step, round, rank)``, unrelated across different ones
    (rank 0's seeds are those of a single process)."""
    entropy = [seed & 0xFFFFFFFF, step, round_] + ([rank] if rank else [])
    state = np.random.SeedSequence(entropy).generate_state(1)
    return int(state[0] & 0x7FFFFFFF)


# --------------------------------------------------------------------------- training rollouts


@dataclass
class Rollout:
    """What generation and scoring produced for one step."""

    kept: list[Completion]
    #: the sampled completions (the policy's own: what reward and length metrics describe).
    generated: list[Completion]
    rounds: int
    groups_filtered: int
    #: per-reward statistics over every generated completion (all rounds).
    summary: dict[str, RewardStats]
    generation_time: float
    scoring_time: float
    #: the guide completions of ``training.guidance`` (also in ``kept`` when kept).
    guides: list[Completion] = field(default_factory=list)
    #: what rewards logged with TRL's ``log_metric``: metric key -> the values of every call
    logged: dict[str, list[float]] = field(default_factory=dict)
    #: multi-turn episodes' ``env/...`` metrics (empty without them).
    episode_metrics: dict[str, float] = field(default_factory=dict)
    #: the generator's own metrics for this rollout (``Generator.take_metrics``), if any.
    backend_metrics: dict[str, float] = field(default_factory=dict)


class EpisodeFailures(RlvrError, RuntimeError):
    """More of a step's episodes failed than ``training.max_failed_episode_frac`` allows
    (the run stops before training on the step, as on a reward that fails too often)."""


def failed_episodes_error(
    what: str, failed: float, total: float, limit: float, environment: str, first: str | None
) -> str:
    """The message of :class:`EpisodeFailures`: how many of ``what`` ("step 2", "the eval at
    step 2") failed, the first cause, what to do."""
    example = f"; the first: {first}" if first else ""
    return (
        f"{what}: {failed:.0f} of {total:.0f} episodes of environment {environment!r} "
        f"failed, more than training.max_failed_episode_frac={limit:g}{example}. Fix the "
        "environment (the warning above counts the failures by kind; `rlvr env check "
        "CONFIG` runs a few episodes alone), raise environment.turn_timeout/episode_timeout "
        "if its calls are only slow, or raise training.max_failed_episode_frac (1: never stop)"
    )


@dataclass
class RolloutRunner:
    """Runs a training step's rollout (:meth:`run`, which returns a :class:`Rollout`) with
    everything it needs, fixed for the run: the generator, the reward scorer, the prompts."""

    generator: Generator
    scorer: Scorer
    #: prints and records reward failures; stops the run when there are too many.
    reward_errors: RewardErrorLog
    prompts: PromptSet
    sampler: PromptSampler
    labels: list[str]
    pad_id: int
    training: TrainingConfig
    backend: str
    #: the algorithm's ``select`` and ``max_generation_rounds``.
    select: Callable[[RolloutBatch], torch.Tensor | None]
    max_rounds: int
    dist: Dist = field(default_factory=Dist)
    #: ``training.guidance``: one completion of each group is the row's own solution.
    guides: Guides | None = None
    #: multi-turn episodes (an environment that is not ``single_turn``); None: completions.
    episodes: EpisodeRunner | None = None
    #: ask the backend for the sampled tokens' log-probs (the behaviour policy of
    #: asynchronous rollouts), from a backend that returns them on request only.
    sampler_logprobs: bool = False

    def run(self, step: int, target: int, max_steps: int = 0) -> Rollout:
        """Generate and score until ``target`` groups are kept (see the module docstring).
        ``max_steps`` is the run's, for the rewards' ``TrainerState``."""
        t = self.training
        logged: dict[str, list[float]] = {}
        self._episode_counts: list[dict[str, float]] = []
        summaries: list[dict[str, RewardStats]] = []
        generated: list[Completion] = []
        all_guides: list[Completion] = []
        kept: list[Completion] = []
        kept_groups = filtered = rounds = 0
        gen_time = score_time = 0.0
        dist = self.dist
        while kept_groups < target and rounds < self.max_rounds:
            # As TRL's trainer state while it scores a step: the steps done, the epochs so far.
            epoch = self.sampler.position / max(self.sampler.size, 1)
            state = TrainerState(global_step=step - 1, epoch=epoch, max_steps=max_steps)
            # Every rank takes the same prompts (one sampler state) and keeps its slice.
            indices, offset = dist.shard(self.sampler.take(target - kept_groups))
            seed = step_seed(t.seed, step, rounds, dist.rank)
            sampling = SamplingParams.from_training(t, seed, logprobs=self.sampler_logprobs)
            got = sample_and_score(
                self.episodes if self.episodes is not None else self.generator,
                self.scorer,
                self.prompts,
                indices,
                t.num_generations,
                sampling,
                self.labels,
                backend=self.backend,
                first_group=rounds * target + kept_groups + offset,
                step=step,
                guides=self.guides,
                reward_errors=self.reward_errors,
                state=state,
            )
            if got.episode_counts is not None:
                self._episode_counts.append(got.episode_counts)
            if self.episodes is not None:  # every rank (a collective), episodes or none
                self._check_failures(step, got)
            for label, metrics in got.scores.metrics.items():
                for name, values in metrics.items():
                    logged.setdefault(logged_metric(label, name), []).extend(values)
            summaries.append(got.summary)
            gen_time += got.generation_time
            score_time += got.scoring_time
            scored, guides = got.scored, got.guides
            rounds += 1
            generated += got.items
            all_guides += guides
            items = sorted(scored + guides, key=lambda c: (c.group, c.guide))
            mask = None
            if items:
                mask = self.select(build_batch(items, self.labels, self.pad_id, step))
            if mask is None and rounds == 1:  # no selection: the first round fills the step
                kept += items
                kept_groups = target
                break
            for c, keep in zip(items, mask.tolist() if mask is not None else [], strict=True):
                c.kept = bool(keep)
            now = [c for c in items if c.kept]
            kept_here = {c.group for c in now}
            kept += now
            filtered += len({c.group for c in items}) - len(kept_here)
            kept_groups += int(dist.sum_numbers([len(kept_here)])[0])
        if generated and all(c.failed is not None for c in generated):
            logger.warning(
                "step %d: every one of its %d episodes failed (training."
                "max_failed_episode_frac=%g lets the run go on): it trains on nothing and "
                "logs no reward",
                step,
                len(generated),
                t.max_failed_episode_frac,
            )
        elif kept_groups == 0:
            # Not an error: with a sparse reward (an accuracy filter_metric) a step can draw
            # only groups that all failed. It trains on nothing: no weight changes.
            logger.warning(
                "step %d: dynamic sampling kept no group in %d generation round(s): every "
                "group's completions scored the same, so this step changes no weight. Raise "
                "algorithm.params.max_generation_rounds, turn dynamic sampling off "
                "(algorithm.params.dynamic_sampling: false), or use rewards that tell "
                "completions apart",
                step,
                rounds,
            )
        elif kept_groups < target:
            logger.warning(
                "step %d: only %d of %d groups kept after %d generation rounds (dynamic "
                "sampling); training on what there is. Raise "
                "algorithm.params.max_generation_rounds to fill steps",
                step,
                kept_groups,
                target,
                rounds,
            )
        return Rollout(
            kept=kept,
            generated=generated,
            rounds=rounds,
            groups_filtered=filtered,
            summary=merge_summaries(summaries),
            generation_time=gen_time,
            scoring_time=score_time,
            guides=all_guides,
            logged=logged,
            episode_metrics=merge_episode_counts(self._episode_counts),
        )

    def _check_failures(self, step: int, got: ScoredSamples) -> None:
        """Stop (:class:`EpisodeFailures`) when more of this round's episodes failed, over
        every rank, than ``training.max_failed_episode_frac`` allows; every rank stops."""
        counts = got.episode_counts or {}
        failed, total = self.dist.sum_numbers(
            [counts.get("env/failed", 0.0), counts.get("env/episodes", 0.0)]
        )
        limit = self.training.max_failed_episode_frac
        if not total or failed / total <= limit:
            return
        first = next((c for c in got.items if c.failed is not None), None)
        where = f"row {first.prompt_index}: {first.failed}" if first is not None else None
        name = self.episodes.environment_name if self.episodes is not None else "?"
        raise EpisodeFailures(
            failed_episodes_error(f"step {step}", failed, total, limit, name, where)
        )


#: Episode metrics that are counts (summed over rounds); the others are means per episode.
_COUNTS = ("env/episodes", "env/failed", "env/prefix_drift")


def merge_episode_counts(parts: Sequence[dict[str, float]]) -> dict[str, float]:
    """The ``env/...`` metrics of a step's generation rounds as one: counts summed, the means
    weighted by their round's episodes."""
    if len(parts) <= 1:
        return dict(parts[0]) if parts else {}
    weights = [p.get("env/episodes", 0.0) - p.get("env/failed", 0.0) for p in parts]
    out: dict[str, float] = {}
    for key in dict.fromkeys(k for p in parts for k in p):
        if key in _COUNTS:
            out[key] = sum(p.get(key, 0.0) for p in parts)
        else:
            pairs = [(p[key], w) for p, w in zip(parts, weights, strict=True) if key in p]
            total = sum(w for _, w in pairs)
            out[key] = sum(v * w for v, w in pairs) / total if total else 0.0
    return out


def step_sample_records(
    ro: Rollout, advantages: Any, prompts: PromptSet, prompt_field: str
) -> list[dict[str, Any]]:
    """A training step's lines of ``samples.jsonl``: every completion (guides included), its
    group, whether dynamic sampling kept it, and its advantage (for per-completion ones)."""
    by_id = {}
    if advantages is not None and advantages.dim() == 1:
        by_id = {id(c): float(a) for c, a in zip(ro.kept, advantages.tolist(), strict=True)}
    out = []
    for c in ro.generated + ro.guides:
        record = {"group": c.group, **sample_record(c, prompts, prompt_field), "kept": c.kept}
        if c.guide:
            record["guide"] = True
        if c.policy_version is not None:
            record["policy_version"] = c.policy_version
        if id(c) in by_id:
            record["advantage"] = by_id[id(c)]
        out.append(record)
    return out


__all__ = [
    "EpisodeFailures",
    "Rollout",
    "RolloutRunner",
    "failed_episodes_error",
    "logged_metric",
    "merge_episode_counts",
    "step_sample_records",
    "step_seed",
]
