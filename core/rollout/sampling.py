"""Sample, then score: the one rollout path of training, evaluation and ``rlvr env check``
(:func:`sample_and_score`): completions from a generator (:func:`generate`; ``training.guidance``
puts the row's own solution in its group) or episodes from a multi-turn environment, scored by
the rewards (:func:`score`) and the environment's named rewards (:func:`add_env_rewards`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rlvr.api.host import PluginError
from rlvr.api.registration import Sample
from rlvr.api.runtime import Generator, SamplingParams, TrainerState
from rlvr.data.prompts import PromptSet
from rlvr.rewards.failures import RewardErrorLog
from rlvr.rewards.scoring import RewardStats, Scorer, Scores, add_env_weighted, env_reward_key
from rlvr.rollout.completions import Completion, answer_ids, episode_completion
from rlvr.rollout.episodes import EpisodeRunner
from rlvr.rollout.guidance import Guides


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
    if sampling.logprobs and out.logprobs is None:
        raise PluginError(
            f"backend {backend!r} returned no log-probabilities though the run asked for them "
            "(SamplingParams.logprobs); the backend must fill Generation.logprobs then"
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


__all__ = ["ScoredSamples", "add_env_rewards", "generate", "sample_and_score", "score"]
