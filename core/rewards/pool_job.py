"""The bookkeeping of one :meth:`rlvr.rewards.pool.RewardPool.score` call: what to run
(:class:`PoolSpec`), its tasks (one per reward and sample, or per batch of a batched reward),
what came back (:class:`PoolResult`), and when the call stops early (``max_error_frac``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlvr.api.registration import BatchRewardFn, RewardFn, Sample


MAX_MESSAGES = 5  # distinct error messages kept per reward
#: With a ``max_error_frac``: a reward whose first this many calls of a
#: :meth:`~rlvr.rewards.pool.RewardPool.score` (at least twice the workers) all time out is
#: taken for stuck (an unreachable judge server), and the call stops there instead of spending
#: ``timeout x calls / workers`` on it.
STUCK_AFTER = 4


@dataclass(frozen=True)
class PoolSpec:
    """One reward to run: ``factory(params)`` builds it in each worker.

    ``factory`` must be importable by reference (a module-level function or class) and
    ``params`` picklable. ``timeout`` is in seconds per call (a batched reward's call on a
    whole batch included).
    ``fallback`` is the value of a call that times out, raises, crashes or returns something
    invalid. ``batch``: the reward is batched (:class:`rlvr.BatchRewardFn`), called once per
    batch: ``"call"`` (every sample of a :meth:`~rlvr.rewards.pool.RewardPool.score` call) or
    ``"group"`` (the samples sharing a ``Sample.group``); None: once per sample.
    ``in_process``: it runs in the calling process (built there, not in the workers; no
    timeout). ``scope``: the view of a multi-turn episode it gets, ``"answer"`` (the
    ``samples`` of :meth:`~rlvr.rewards.pool.RewardPool.score`) or ``"transcript"`` (its
    ``transcripts``).
    """

    label: str
    factory: Callable[[Any], RewardFn | BatchRewardFn]
    params: Any = None
    timeout: float = 10.0
    fallback: float | None = 0.0
    batch: str | None = None
    in_process: bool = False
    scope: str = "answer"


@dataclass
class PoolResult:
    """The values of one :meth:`~rlvr.rewards.pool.RewardPool.score` call, by reward label, in
    sample order."""

    values: dict[str, list[float | None]]
    timeouts: dict[str, int]
    errors: dict[str, int]
    error_messages: dict[str, list[str]] = field(default_factory=dict)
    #: per label: sample index -> why that call failed (errors and timeouts)
    failures: dict[str, dict[int, str]] = field(default_factory=dict)
    #: per label: sample index -> where its exception was raised (calls that raised)
    sites: dict[str, dict[int, str]] = field(default_factory=dict)
    #: per label: site -> the traceback of its first occurrence in a process
    tracebacks: dict[str, dict[str, str]] = field(default_factory=dict)
    #: why the call stopped before scoring every sample (``max_error_frac``); the values of
    #: the calls it did not make are None. None when every call was made.
    stopped: str | None = None
    #: per label: what batched rewards logged (:class:`rlvr.BatchOutput`): column -> one
    #: value per sample (None where not logged), and metric name -> the values logged
    columns: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    metrics: dict[str, dict[str, list[float]]] = field(default_factory=dict)


def _batches(samples: Sequence[Sample], mode: str) -> list[list[int]]:
    """The sample indices of each batch: all of them (``"call"``) or one batch per
    ``Sample.group`` in order of first appearance (``"group"``; a sample without a group is
    a batch of its own)."""
    if not samples:
        return []
    if mode == "call":
        return [list(range(len(samples)))]
    groups: dict[Any, list[int]] = {}
    for j, sample in enumerate(samples):
        key = ("group", sample.group) if sample.group is not None else ("alone", j)
        groups.setdefault(key, []).append(j)
    return list(groups.values())


class Job:
    """One :meth:`~rlvr.rewards.pool.RewardPool.score` call. Task ``t`` is ``tasks[t] =
    (reward index, sample index)``, or ``(reward index, [sample indices])`` for a batched
    reward's batch (those first: they are the long ones). ``local`` are the tasks the parent
    runs itself."""

    def __init__(
        self,
        specs: Sequence[PoolSpec],
        samples: Sequence[Sample],
        max_error_frac: float | None = None,
        stuck_after: int = STUCK_AFTER,
        *,
        by_group: bool = False,
        local: Callable[[int], bool] = lambda i: False,
        transcripts: Sequence[Sample] | None = None,
    ) -> None:
        self.specs = specs
        self.samples = samples
        if transcripts is not None and len(transcripts) != len(samples):
            raise ValueError(f"{len(transcripts)} transcripts for {len(samples)} samples")
        #: what each reward sees, by reward index: its scope's samples
        self.views = [
            transcripts if transcripts is not None and spec.scope == "transcript" else samples
            for spec in specs
        ]
        self.tasks: list[tuple[int, Any]] = []
        for i, spec in enumerate(specs):
            if spec.batch is not None:
                mode = "group" if by_group else spec.batch
                self.tasks.extend((i, batch) for batch in _batches(samples, mode))
        single = [i for i, spec in enumerate(specs) if spec.batch is None]
        self.tasks.extend((i, j) for j in range(len(samples)) for i in single)
        self.remaining = len(self.tasks)
        self.local = [t for t, (i, _) in enumerate(self.tasks) if local(i)]
        self.queue: deque[int] = deque(t for t, (i, _) in enumerate(self.tasks) if not local(i))
        labels = [s.label for s in specs]
        #: failures (errors and timeouts) a reward may have before the job stops (None: all)
        self.max_failures = (
            max_error_frac * len(samples)
            if max_error_frac is not None and max_error_frac < 1
            else None
        )
        self.stuck_after = stuck_after
        self.answered = dict.fromkeys(labels, 0)  # calls that returned (a value or an error)
        self.timed_out = dict.fromkeys(labels, 0)  # calls that timed out
        self.result = PoolResult(
            values={label: [None] * len(samples) for label in labels},
            timeouts=dict.fromkeys(labels, 0),
            errors=dict.fromkeys(labels, 0),
            error_messages={label: [] for label in labels},
            failures={label: {} for label in labels},
            sites={label: {} for label in labels},
            tracebacks={label: {} for label in labels},
            columns={label: {} for label in labels},
            metrics={label: {} for label in labels},
        )

    def task(self, t: int) -> tuple[int, int, Any]:
        """What a worker gets for task ``t``: ``(t, reward index, sample or [samples])``."""
        i, which = self.tasks[t]
        view = self.views[i]
        if isinstance(which, list):
            return t, i, [view[j] for j in which]
        return t, i, view[which]

    def spec(self, t: int) -> PoolSpec:
        return self.specs[self.tasks[t][0]]

    def timeout(self, t: int) -> float:
        """Task ``t``'s deadline: its reward's timeout (one call, a batch's too)."""
        return self.spec(t).timeout

    def record(self, t: int, *reply: Any) -> None:
        """Record what task ``t`` returned (the reply of
        :func:`~rlvr.rewards.pool_calls.call_reward` or
        :func:`~rlvr.rewards.pool_calls.call_batch`)."""
        spec = self.spec(t)
        which = self.tasks[t][1]
        if not isinstance(which, list):
            self._settle(t, spec, which, *reply)
            return
        results, error, site, tb, logs = reply
        if results is None:
            self.fail(t, error or "no result", site=site, tb=tb)
            return
        self.remaining -= 1
        self.answered[spec.label] += 1
        for j, (value, why) in zip(which, results, strict=True):
            self._value(spec, j, value, why, None, None, False)
        if logs:
            columns = self.result.columns[spec.label]
            for name, values in logs.get("columns", {}).items():
                column = columns.setdefault(str(name), [None] * len(self.samples))
                for j, value in zip(which, values, strict=False):
                    column[j] = value
            metrics = self.result.metrics[spec.label]
            for name, values in logs.get("metrics", {}).items():
                metrics.setdefault(str(name), []).extend(float(v) for v in values)
        self._check(spec)

    def fail(
        self,
        t: int,
        error: str,
        *,
        site: str | None = None,
        tb: str | None = None,
        timeout: bool = False,
    ) -> None:
        """Task ``t`` failed as a whole (raised, crashed, timed out): each of its samples
        gets the fallback and counts one error (or timeout)."""
        spec = self.spec(t)
        which = self.tasks[t][1]
        if not isinstance(which, list):
            self._settle(t, spec, which, None, error, site, tb, timeout)
            return
        self.remaining -= 1
        if timeout:
            self.timed_out[spec.label] += 1
        else:
            self.answered[spec.label] += 1
        for j in which:
            self._value(spec, j, None, error, site, tb, timeout)
        self._check(spec)

    def _settle(
        self,
        t: int,
        spec: PoolSpec,
        j: int,
        value: float | None,
        error: str | None,
        site: str | None = None,
        tb: str | None = None,
        timeout: bool = False,
    ) -> None:
        self.remaining -= 1
        if timeout:
            self.timed_out[spec.label] += 1
        else:
            self.answered[spec.label] += 1
        self._value(spec, j, value, error, site, tb, timeout)
        if error is not None:
            self._check(spec)

    def _value(
        self,
        spec: PoolSpec,
        j: int,
        value: float | None,
        error: str | None,
        site: str | None,
        tb: str | None,
        timeout: bool,
    ) -> None:
        """Sample ``j``'s value of ``spec``: ``value``, or the fallback and a failure."""
        if error is None:
            self.result.values[spec.label][j] = value
            return
        self.result.values[spec.label][j] = spec.fallback
        self.result.failures[spec.label][j] = error
        if site is not None:
            self.result.sites[spec.label][j] = site
        if site is not None and tb is not None:
            self.result.tracebacks[spec.label].setdefault(site, tb)
        if timeout:
            self.result.timeouts[spec.label] += 1
        else:
            self.result.errors[spec.label] += 1
            messages = self.result.error_messages[spec.label]
            if len(messages) < MAX_MESSAGES and error not in messages:
                messages.append(error)

    def _check(self, spec: PoolSpec) -> None:
        """Stop the job (``result.stopped``) once ``spec``'s failures make the outcome
        certain: more than ``max_error_frac`` of the samples, or its first ``stuck_after``
        calls all timed out (the caller stops the run either way)."""
        if self.max_failures is None or self.result.stopped is not None:
            return
        label, n = spec.label, len(self.samples)
        failed = len(self.result.failures[label])
        timeouts = self.timed_out[label]
        if failed > self.max_failures:
            self.result.stopped = (
                f"reward {label!r} failed on {failed} of the {n} calls already, past the share "
                "allowed; the rest were not made"
            )
        elif self.answered[label] == 0 and timeouts >= self.stuck_after:
            left = n - failed
            self.result.stopped = (
                f"reward {label!r} timed out on each of its first {timeouts} calls "
                f"({spec.timeout:g} s each) and answered none: it looks stuck (e.g. a judge "
                f"server it cannot reach); the other {left} calls were not made"
            )

    @property
    def stopped(self) -> bool:
        return self.result.stopped is not None


__all__ = ["Job", "PoolResult", "PoolSpec", "STUCK_AFTER"]
