"""Rollout: generate completions for prompts, score them, and keep the groups the algorithm
selects. ``rlvr train`` and ``rlvr eval`` share :func:`generate`, :func:`score` and
:func:`sample_record`; :class:`RolloutRunner` adds the training step's dynamic-sampling rounds.

One training rollout (:meth:`RolloutRunner.run`): take the step's prompts, sample
``num_generations`` completions each, score them (one reward pool for the whole run); when the
algorithm's ``select`` filters groups out (dynamic sampling), generate more with new prompts
until the step has its prompts' worth of groups or ``max_generation_rounds`` rounds ran.
Every round gets its own sampling seed from ``(seed, step, round)`` (:func:`step_seed`).

Under data parallelism (:mod:`rlvr.parallel.distributed`) ``target`` counts the whole step's
prompts:
every rank takes the same prompts from its copy of the sampler and generates for its slice, and
the rounds stop on the global count of kept groups, so every rank runs the same rounds.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from rlvr.api.errors import RlvrError
from rlvr.api.host import PluginError
from rlvr.api.registration import Sample
from rlvr.api.runtime import Generator, RolloutBatch, SamplingParams, TrainerState
from rlvr.config.schema import TrainingConfig
from rlvr.data.prompts import PromptSampler, PromptSet
from rlvr.parallel.distributed import Dist
from rlvr.rewards.failures import RewardErrorLog
from rlvr.rewards.scoring import (
    RewardStats,
    Scorer,
    Scores,
    add_env_weighted,
    env_reward_key,
    merge_summaries,
)
from rlvr.rollout.episodes import Episode, EpisodeRunner
from rlvr.rollout.guidance import Guides

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


@dataclass
class Completion:
    """One generated completion with everything a step needs about it."""

    prompt_index: int
    group: int
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    truncated: bool
    score: float = 0.0
    rewards: dict[str, float | None] = field(default_factory=dict)
    sampler_logp: list[float] | None = None
    kept: bool = True
    #: the row's own solution (``training.guidance``), not sampled from the policy.
    guide: bool = False
    #: some reward gave it a value (False: every reward returned None, TRL's unscorable row)
    scored: bool = True
    #: the columns batched rewards logged for it (TRL's ``log_extra``)
    extra: dict[str, Any] = field(default_factory=dict)
    #: multi-turn episodes: 1 on the tokens the model sampled, 0 on the environment's (None:
    #: every token was sampled).
    action_mask: list[int] | None = None
    #: multi-turn episodes: why the episode failed (it is then neither scored nor trained on).
    failed: str | None = None
    #: multi-turn episodes: the whole conversation (``text`` is the last assistant message).
    transcript: list[dict[str, Any]] | None = None
    #: multi-turn episodes: the named rewards the environment returned (added to ``score``
    #: with their ``environment.reward_weights``; also in ``rewards``).
    env_rewards: dict[str, float] = field(default_factory=dict)
    #: multi-turn episodes: the whole episode after its first prompt, decoded (what a reward
    #: whose scope is ``transcript`` scores).
    transcript_text: str | None = None


def episode_completion(e: Episode) -> Completion:
    """The :class:`Completion` of a finished episode: its tokens as sampled and appended."""
    return Completion(
        prompt_index=e.prompt_index,
        group=e.group,
        prompt_ids=e.prompt_ids,
        token_ids=e.token_ids,
        text=e.final_text,
        truncated=e.truncated,
        sampler_logp=e.logprobs if e.sampled_logprobs else None,
        kept=e.failed is None,
        scored=e.failed is None,  # a failed episode has no reward (not 0.0)
        action_mask=e.action_mask,
        failed=e.failed,
        transcript=e.messages,
        env_rewards=dict(e.rewards),
        transcript_text=e.transcript_text,
    )


def answer_ids(c: Completion) -> list[int]:
    """The tokens of ``c``'s final answer: all of a single completion, the last sampled turn
    of an episode (the run of 1s that ends its action mask)."""
    if c.action_mask is None:
        return c.token_ids
    end = len(c.action_mask)
    while end > 0 and c.action_mask[end - 1] == 0:
        end -= 1
    start = end
    while start > 0 and c.action_mask[start - 1] == 1:
        start -= 1
    return c.token_ids[start:end]


def add_env_rewards(
    items: Sequence[Completion], labels: Sequence[str], weights: dict[str, float]
) -> dict[str, RewardStats]:
    """Add the environment's named rewards of ``items`` to their scores (each times its
    weight, 1.0 when not listed) and to their ``rewards``; an episode with one is scored.
    Returns each name's statistics over ``items``, keyed as ``rewards/<key>`` logs them (a
    weighted name no episode returned is there too, its mean NaN)."""
    names = dict.fromkeys([*weights, *(k for c in items for k in c.env_rewards)])
    for c in items:
        c.score = add_env_weighted(c.score, c.env_rewards, weights)
        for name, value in c.env_rewards.items():
            c.rewards[env_reward_key(name, labels)] = value
        if c.env_rewards:
            c.scored = True
    return {
        env_reward_key(name, labels): RewardStats.of([c.env_rewards.get(name) for c in items])
        for name in names
    }


# --------------------------------------------------------------------------- shared steps


def generate(
    generator: Generator,
    prompts: PromptSet,
    indices: Sequence[int],
    n: int,
    sampling: SamplingParams,
    *,
    backend: str,
    first_group: int = 0,
) -> list[Completion]:
    """``n`` completions of each prompt ``indices[j]``, in group ``first_group + j``."""
    batch = [prompts[i] for i in indices]
    with torch.no_grad():
        out = generator.generate([p.ids for p in batch], n, sampling)
    expected = len(batch) * n
    if len(out.token_ids) != expected or len(out.texts) != expected:
        raise PluginError(
            f"backend {backend!r} returned {len(out.token_ids)} completions for "
            f"{len(batch)} prompts x {n} (expected {expected})"
        )
    return [
        Completion(
            prompt_index=indices[k // n],
            group=first_group + k // n,
            prompt_ids=batch[k // n].ids,
            token_ids=list(out.token_ids[k]),
            text=out.texts[k],
            truncated=bool(out.truncated[k]),
            sampler_logp=None if out.logprobs is None else list(out.logprobs[k]),
        )
        for k in range(expected)
    ]


def score(
    scorer: Scorer,
    prompts: PromptSet,
    items: Sequence[Completion],
    labels: Sequence[str],
    *,
    reward_errors: RewardErrorLog | None = None,
    step: int | None = None,
    state: TrainerState | None = None,
) -> Scores:
    """Score ``items`` with every reward; sets each one's ``score``, ``rewards``, ``scored``
    and ``extra``. ``reward_errors`` reports what failed (and may stop the run,
    :mod:`rlvr.rewards.failures`); ``state`` is where training stands, for the rewards.
    A multi-turn episode is its final answer to a reward whose scope is ``answer``, and its
    whole transcript to one whose scope is ``transcript`` (:class:`rlvr.plugin.Sample`)."""
    samples = []
    for c in items:
        ids = answer_ids(c)
        samples.append(
            Sample(
                completion=c.text,
                prompt=prompts[c.prompt_index].text,
                row=prompts[c.prompt_index].row,
                num_tokens=len(ids),
                completion_ids=tuple(ids),
                group=c.group,
                state=state or TrainerState(),
                messages=tuple(c.transcript or ()),
                env_rewards=dict(c.env_rewards),
            )
        )
    transcripts = None
    if any(c.transcript_text is not None for c in items):
        transcripts = [
            s
            if c.transcript_text is None
            else dataclasses.replace(
                s,
                completion=c.transcript_text,
                num_tokens=len(c.token_ids),
                completion_ids=tuple(c.token_ids),
            )
            for s, c in zip(samples, items, strict=True)
        ]
    frac = reward_errors.max_error_frac if reward_errors is not None else None
    # stops early past that share
    scores = scorer.score(samples, max_error_frac=frac, transcripts=transcripts)
    if reward_errors is not None:
        reward_errors.report(scores, samples, step=step)
    for i, c in enumerate(items):
        c.score = float(scores.total[i])
        c.rewards = {label: scores.per_reward[label][i] for label in labels}
        c.scored = scores.scored[i] if scores.scored else True
        c.extra = scores.extra(i)
    return scores


# --------------------------------------------------------------------------- sample, then score


@dataclass
class ScoredSamples:
    """What :func:`sample_and_score` made of one call's prompts."""

    #: every completion sampled (an episode each with an episode runner), failed ones included
    items: list[Completion]
    #: the ones scored: ``items`` without the failed episodes (neither scored nor trained on)
    scored: list[Completion]
    #: the guide completions of ``training.guidance`` (scored after ``scored``)
    guides: list[Completion]
    #: the configured rewards' scores of ``scored + guides``
    scores: Scores
    #: per-reward statistics over ``scored`` (not the guides), environment rewards included
    summary: dict[str, RewardStats]
    #: the episodes' ``env/...`` counts (``env/failed`` among them); None without episodes
    episode_counts: dict[str, float] | None
    generation_time: float
    scoring_time: float


def sample_and_score(
    source: Generator | EpisodeRunner,
    scorer: Scorer,
    prompts: PromptSet,
    indices: Sequence[int],
    n: int,
    sampling: SamplingParams,
    labels: Sequence[str],
    *,
    backend: str,
    first_group: int = 0,
    step: int | None = None,
    guides: Guides | None = None,
    reward_errors: RewardErrorLog | None = None,
    state: TrainerState | None = None,
) -> ScoredSamples:
    """The one rollout path of training, evaluation and ``rlvr env check``: ``n`` completions
    of each prompt ``indices[j]`` (in group ``first_group + j``) from ``source``, a generator
    or a multi-turn :class:`~rlvr.rollout.episodes.EpisodeRunner`; the failed episodes dropped
    (counted in ``episode_counts``); the rest scored by the rewards (:func:`score`), then the
    environment's named rewards added with its ``reward_weights`` (:func:`add_env_rewards`).
    ``guides``: one completion of each group is the row's own solution (not with episodes:
    config validation refuses that)."""
    t0 = time.perf_counter()
    items: list[Completion] = []
    guided: list[Completion] = []
    counts = None
    episodes = source if isinstance(source, EpisodeRunner) else None
    if indices and episodes is not None:
        found = episodes.run(indices, n, sampling, first_group, step or 0)
        counts = episodes.last_counts
        items = [episode_completion(e) for e in found]
    elif indices:
        assert not isinstance(source, EpisodeRunner)
        items, guided = _sample(source, prompts, indices, n, sampling, backend, first_group, guides)
    t1 = time.perf_counter()
    # A failed episode is not scored: its text says nothing about the policy.
    scored = [c for c in items if c.failed is None]
    scores = score(
        scorer,
        prompts,
        scored + guided,
        labels,
        reward_errors=reward_errors,
        step=step,
        state=state,
    )
    env_stats = {}
    if episodes is not None:
        env_stats = add_env_rewards(scored, labels, episodes.reward_weights)
    # The reward statistics describe the policy's samples, not the guides.
    summary = scores.summary(first=len(scored)) | env_stats
    return ScoredSamples(
        items, scored, guided, scores, summary, counts, t1 - t0, time.perf_counter() - t1
    )


def _guide_completions(
    guides: Guides | None, prompts: PromptSet, indices: Sequence[int], first_group: int
) -> list[Completion]:
    """The guide completion of each prompt whose solution fits, in its prompt's group."""
    if guides is None:
        return []
    out = []
    for j, i in enumerate(indices):
        guide = guides.get(i)
        if guide is not None:
            text, ids = guide
            out.append(Completion(i, first_group + j, prompts[i].ids, ids, text, False, guide=True))
    return out


def _sample(
    generator: Generator,
    prompts: PromptSet,
    indices: Sequence[int],
    n: int,
    sampling: SamplingParams,
    backend: str,
    first_group: int,
    guides: Guides | None,
) -> tuple[list[Completion], list[Completion]]:
    """``(sampled, guides)``: ``n`` completions of each prompt, one of them the guide where
    the prompt has one that fits."""
    found = _guide_completions(guides, prompts, indices, first_group)
    guided = {c.prompt_index for c in found}
    with_guide = [j for j, i in enumerate(indices) if i in guided]
    without = [j for j, i in enumerate(indices) if i not in guided]
    groups: list[list[Completion]] = []
    for part, size in ((with_guide, n - 1), (without, n)):
        if not part:
            continue
        items = generate(
            generator, prompts, [indices[j] for j in part], size, sampling, backend=backend
        )
        for c in items:  # back to the group of its position in ``indices``
            c.group = first_group + part[c.group]
        groups.append(items)
    sampled = sorted((c for g in groups for c in g), key=lambda c: c.group)
    return sampled, found


def sample_record(c: Completion, prompts: PromptSet, prompt_field: str) -> dict[str, Any]:
    """What ``samples.jsonl`` says about one completion (train and eval add their fields)."""
    prompt = prompts[c.prompt_index]
    record = {
        "prompt": prompt.text,
        "completion": c.text,
        "reward": c.score,
        "rewards": c.rewards,
        "num_tokens": len(c.token_ids),
        "truncated": c.truncated,
        "row": {k: v for k, v in prompt.row.items() if k != prompt_field},
    }
    if not c.scored:  # every reward returned None: left out of its group's baseline
        record["scored"] = False
    if c.extra:  # the columns rewards logged (TRL's log_extra)
        record["extra"] = c.extra
    return record | _episode_record(c)


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
        if id(c) in by_id:
            record["advantage"] = by_id[id(c)]
        out.append(record)
    return out


def _episode_record(c: Completion) -> dict[str, Any]:
    """What ``samples.jsonl`` adds for a multi-turn episode (nothing for a completion)."""
    if c.transcript is None:
        return {}
    out: dict[str, Any] = {
        "transcript": c.transcript,
        "env_tokens": (c.action_mask or []).count(0),
        "env_rewards": c.env_rewards,
    }
    if c.failed is not None:
        out["failed"] = c.failed
    return out


# --------------------------------------------------------------------------- batches


def _pad_right(rows: Sequence[Sequence[Any]], width: int, value: Any, dtype) -> torch.Tensor:
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, r in enumerate(rows):
        if len(r):
            out[i, : len(r)] = torch.tensor(list(r), dtype=dtype)
    return out


def _pad_left(rows: Sequence[Sequence[int]], width: int, value: int) -> torch.Tensor:
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, r in enumerate(rows):
        if len(r):
            out[i, width - len(r) :] = torch.tensor(list(r), dtype=torch.long)
    return out


def build_batch(
    items: Sequence[Completion], labels: Sequence[str], pad_id: int, step: int = 0
) -> RolloutBatch:
    """The tensors of ``items`` (CPU): prompts left-padded, completions right-padded."""
    p = max((len(c.prompt_ids) for c in items), default=1)
    t = max(max((len(c.token_ids) for c in items), default=1), 1)
    # the configured rewards, then the environment's (their names are in ``rewards`` too)
    names = dict.fromkeys([*labels, *(k for c in items for k in c.rewards)])
    components = {
        label: torch.tensor(
            [math.nan if (v := c.rewards.get(label)) is None else v for c in items],
            dtype=torch.float32,
        )
        for label in names
    }
    sampler_logp = None
    rows = [c.sampler_logp for c in items]
    if items and all(r is not None for r in rows):
        sampler_logp = _pad_right(rows, t, 0.0, torch.float32)  # type: ignore[arg-type]
    action_mask = None
    if any(c.action_mask is not None for c in items):
        masks = [[1] * len(c.token_ids) if c.action_mask is None else c.action_mask for c in items]
        action_mask = _pad_right(masks, t, 0, torch.long)
    return RolloutBatch(
        prompt_ids=_pad_left([c.prompt_ids for c in items], p, pad_id),
        prompt_mask=_pad_left([[1] * len(c.prompt_ids) for c in items], p, 0),
        completion_ids=_pad_right([c.token_ids for c in items], t, pad_id, torch.long),
        completion_mask=_pad_right([[1] * len(c.token_ids) for c in items], t, 0, torch.long),
        group_ids=torch.tensor([c.group for c in items], dtype=torch.long),
        scores=torch.tensor([c.score for c in items], dtype=torch.float32),
        lengths=torch.tensor([len(c.token_ids) for c in items], dtype=torch.long),
        truncated=torch.tensor([c.truncated for c in items], dtype=torch.bool),
        reward_components=components,
        sampler_logp=sampler_logp,
        action_mask=action_mask,
        step=step,
        scored=torch.tensor([c.scored for c in items], dtype=torch.bool),
    )


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


class EpisodeFailures(RlvrError, RuntimeError):
    """More of a step's episodes failed than ``training.max_failed_episode_frac`` allows
    (the run stops before training on the step, as on a reward that fails too often)."""


def failed_episodes_error(
    step: int, failed: float, total: float, limit: float, environment: str, first: str | None
) -> str:
    """The message of :class:`EpisodeFailures`: how many, the first cause, what to do."""
    example = f"; the first: {first}" if first else ""
    return (
        f"step {step}: {failed:.0f} of {total:.0f} episodes of environment {environment!r} "
        f"failed, more than training.max_failed_episode_frac={limit:g}{example}. Fix the "
        "environment (the warning above counts the step's failures by kind; `rlvr env check "
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
            sampling = SamplingParams.from_training(t, seed)
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
        raise EpisodeFailures(failed_episodes_error(step, failed, total, limit, name, where))


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


__all__ = [
    "Completion",
    "EpisodeFailures",
    "Rollout",
    "RolloutRunner",
    "ScoredSamples",
    "add_env_rewards",
    "answer_ids",
    "build_batch",
    "env_reward_key",
    "episode_completion",
    "failed_episodes_error",
    "generate",
    "logged_metric",
    "merge_episode_counts",
    "sample_and_score",
    "sample_record",
    "score",
    "step_sample_records",
    "step_seed",
]
