"""Compose configured rewards: run them through a :class:`~rlvr.rewards.pool.RewardPool`, weight
them, summarise them.

A reward may return ``None`` ("not applicable"): it counts as 0 in the weighted total (TRL's
``nansum``) and is left out of that reward's mean and std. A sample for which *every* reward
returned None is unscored (``Scores.scored``): the group-relative algorithms leave it out of its
group's baseline and give it advantage 0, as TRL does. A call that fails gets its entry's
``fallback`` (a number), so it counts as scored.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlvr.rewards.pool import PoolResult, PoolSpec, RewardPool

if TYPE_CHECKING:
    from rlvr.api.registration import BatchRewardFn, RewardFn, Sample


@dataclass(frozen=True)
class ScoreEntry:
    """One configured reward: a :class:`~rlvr.rewards.pool.PoolSpec` plus its ``weight`` in the
    total."""

    label: str
    factory: Callable[[Any], RewardFn | BatchRewardFn]
    params: Any = None
    weight: float = 1.0
    timeout: float = 10.0
    fallback: float | None = 0.0
    on_error: str = "fallback"
    #: a batched reward's batches (``"call"`` or ``"group"``), None for a per-sample one
    batch: str | None = None
    in_process: bool = False
    #: what it scores of a multi-turn episode: ``"answer"`` or ``"transcript"``
    scope: str = "answer"


@dataclass(frozen=True)
class RewardStats:
    """One reward's statistics over ``count`` samples.

    ``mean`` and ``std`` (population std) are over the ``count - none_count`` values that are
    not ``None``; both are NaN when there are none. Fallback values of timeouts and errors are
    included (they are the values the training sees).
    """

    mean: float
    std: float
    none_count: int
    timeouts: int
    errors: int
    count: int

    @classmethod
    def of(cls, values: Sequence[float | None], timeouts: int = 0, errors: int = 0) -> RewardStats:
        """Statistics of ``values`` (e.g. ``RewardStats.of(scores.total)``)."""
        present = [v for v in values if v is not None]
        n = len(present)
        mean = sum(present) / n if n else math.nan
        std = math.sqrt(sum((v - mean) ** 2 for v in present) / n) if n else math.nan
        return cls(mean, std, len(values) - n, timeouts, errors, len(values))

    def merge(self, other: RewardStats) -> RewardStats:
        """The statistics of both sets of samples together (exact, Chan et al.)."""
        na, nb = self.count - self.none_count, other.count - other.none_count
        if not nb:
            mean, std = self.mean, self.std
        elif not na:
            mean, std = other.mean, other.std
        else:
            n = na + nb
            delta = other.mean - self.mean
            mean = self.mean + delta * nb / n
            m2 = self.std**2 * na + other.std**2 * nb + delta**2 * na * nb / n
            std = math.sqrt(m2 / n)
        return RewardStats(
            mean,
            std,
            self.none_count + other.none_count,
            self.timeouts + other.timeouts,
            self.errors + other.errors,
            self.count + other.count,
        )


def score_entries(config: Any, host: Any) -> list[ScoreEntry]:
    """The entries of ``config.rewards``, their factories found in ``host.rewards``."""
    entries = []
    for e in config.rewards:
        record = host.rewards[e.name]
        entries.append(
            ScoreEntry(
                label=e.key,
                factory=record.factory,
                params=e.params,
                weight=e.weight,
                timeout=e.timeout,
                fallback=e.fallback,
                on_error=e.on_error,
                batch=record.batch(e.params) if record.batched else None,
                in_process=record.in_process,
                scope=e.scope or record.scope,
            )
        )
    return entries


def merge_summaries(summaries: Iterable[dict[str, RewardStats]]) -> dict[str, RewardStats]:
    """Combine the :meth:`Scores.summary` of several batches into one, label by label."""
    merged: dict[str, RewardStats] = {}
    for summary in summaries:
        for label, stats in summary.items():
            merged[label] = merged[label].merge(stats) if label in merged else stats
    return merged


def env_reward_key(name: str, labels: Sequence[str]) -> str:
    """The component name of an environment's reward ``name``: itself, or ``env/<name>`` when
    a configured reward has that label (config validation refuses such a clash when the
    environment declares its rewards; an undeclared one is kept apart here)."""
    return f"env/{name}" if name in labels else name


def add_env_weighted(
    total: float, named: Mapping[str, float], weights: Mapping[str, float]
) -> float:
    """``total`` plus each of an environment's ``named`` rewards times its weight in
    ``environment.reward_weights`` (1.0 when not listed; 0: logged, not counted): how
    training, evaluation and ``rlvr rewards score`` all add them to a sample's score."""
    for name, value in named.items():
        total += weights.get(name, 1.0) * value
    return total


@dataclass
class Scores:
    """The scores of one batch: ``total[i]`` is the weighted sum for sample ``i``, ``result``
    what the pool returned (each reward's raw values, its failures, what it logged). The
    properties below read ``result`` under the names scripts and the failure report use."""

    total: list[float]
    result: PoolResult
    #: per sample: some reward gave it a value (False: every reward returned None)
    scored: list[bool] = field(default_factory=list)

    @property
    def per_reward(self) -> dict[str, list[float | None]]:
        """Each reward's raw values, by label, in sample order."""
        return self.result.values

    @property
    def timeouts(self) -> dict[str, int]:
        return self.result.timeouts

    @property
    def errors(self) -> dict[str, int]:
        return self.result.errors

    @property
    def error_messages(self) -> dict[str, list[str]]:
        return self.result.error_messages

    @property
    def failures(self) -> dict[str, dict[int, str]]:
        """Per label: sample index -> why that call failed."""
        return self.result.failures

    @property
    def sites(self) -> dict[str, dict[int, str]]:
        """Per label: sample index -> where its exception was raised."""
        return self.result.sites

    @property
    def tracebacks(self) -> dict[str, dict[str, str]]:
        """Per label: site -> its first traceback."""
        return self.result.tracebacks

    @property
    def stopped(self) -> str | None:
        """Why scoring stopped before every call was made (``max_error_frac``), else None."""
        return self.result.stopped

    @property
    def columns(self) -> dict[str, dict[str, list[Any]]]:
        """Per label: the columns a batched reward logged, one value per sample."""
        return self.result.columns

    @property
    def metrics(self) -> dict[str, dict[str, list[float]]]:
        """Per label: the metrics a batched reward logged."""
        return self.result.metrics

    def extra(self, i: int) -> dict[str, Any]:
        """The columns the rewards logged for sample ``i`` (TRL's ``log_extra``)."""
        out: dict[str, Any] = {}
        for columns in self.columns.values():
            for name, values in columns.items():
                if values[i] is not None:
                    out[name] = values[i]
        return out

    def summary(self, first: int | None = None) -> dict[str, RewardStats]:
        """Per-reward statistics of this batch, or of its first ``first`` samples (timeouts and
        errors are counted over the whole batch)."""
        return {
            label: RewardStats.of(
                values[:first], self.timeouts.get(label, 0), self.errors.get(label, 0)
            )
            for label, values in self.per_reward.items()
        }


class Scorer:
    """Scores samples with weighted rewards, in a :class:`~rlvr.rewards.pool.RewardPool`.

    ``pool_options`` go to the pool (``start_method``, ``build_timeout``, ``max_chunk``).
    Create one per run and reuse it; use as a context manager or call :meth:`close`.
    Public as ``rlvr.Scorer`` (build it with :meth:`for_config`): scoring completions made
    elsewhere (best-of-n filtering, a custom loop) in the worker processes the trainer uses.
    """

    @classmethod
    def for_config(cls, config: Any, host: Any, *, workers: int | None = None) -> Scorer:
        """A scorer of ``config.rewards`` (weights, timeouts, fallbacks as configured), their
        factories found in ``host``; ``workers`` defaults to ``training.reward_workers``."""
        if workers is None:
            workers = config.training.reward_workers
        return cls(score_entries(config, host), workers=workers)

    def __init__(
        self, entries: Sequence[ScoreEntry], workers: int = 2, **pool_options: Any
    ) -> None:
        self.entries = list(entries)
        specs = [
            PoolSpec(
                e.label, e.factory, e.params, e.timeout, e.fallback, e.batch, e.in_process, e.scope
            )
            for e in entries
        ]
        self.pool = RewardPool(specs, workers=workers, **pool_options)

    def score(
        self,
        samples: Sequence[Sample],
        *,
        max_error_frac: float | None = None,
        by_group: bool = False,
        transcripts: Sequence[Sample] | None = None,
    ) -> Scores:
        """Score ``samples``; with ``max_error_frac`` scoring stops early once a reward's
        failures make that share certain to be exceeded, and ``by_group`` batches every
        batched reward by ``Sample.group`` (:meth:`RewardPool.score`). ``transcripts``: the
        same samples as the rewards whose scope is ``"transcript"`` see them (multi-turn
        episodes); None: every reward sees ``samples``."""
        result = self.pool.score(
            samples, max_error_frac=max_error_frac, by_group=by_group, transcripts=transcripts
        )
        total = [
            sum((e.weight * (result.values[e.label][i] or 0.0) for e in self.entries), 0.0)
            for i in range(len(samples))
        ]
        scored = [
            not self.entries or any(result.values[e.label][i] is not None for e in self.entries)
            for i in range(len(samples))
        ]
        return Scores(total, result, scored)

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["RewardStats", "ScoreEntry", "Scorer", "Scores", "merge_summaries", "score_entries"]
