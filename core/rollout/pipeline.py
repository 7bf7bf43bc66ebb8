"""Asynchronous rollouts (``training.max_staleness: k`` >= 1): a producer thread runs the next
steps' rollouts while the trainer trains this one, from weights ``k`` updates old.

There is still one rollout path: the producer calls the step's own rollout function (what the
synchronous loop calls), one step after another in step order, so each step gets the prompts and
seeds a synchronous run would give it. What changes is which weights sample it, and that is
fixed, not left to timing: step ``s`` samples from the weights after step ``s - 1 - k``'s
update (the run's first weights for the first ``k + 1`` steps), so an asynchronous run
reproduces. Versions count updates: the weights after step ``s``'s update are version ``s``. A
weight update waits until every step that samples from the weights it replaces has its rollout;
a lock keeps a rollout, an update and an eval apart. A generator that can take weights while it
samples (``takes_weights_in_flight``: vLLM servers with ``in_flight_updates: pause``) does not
make the update wait for the rollout in flight: that rollout's remaining tokens come from the
new weights, which is faster and no longer reproducible; its ``policy_version`` is the one it
started from, so the staleness bound still holds.

The prompt order the checkpoints keep is the trainer's (the steps it took), not the producer's:
each rollout carries the producer's sampler state after it, loaded into the trainer's sampler
when the trainer takes it. A resumed run so regenerates the rollouts that were in flight.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rlvr.api.runtime import Generator
from rlvr.data.prompts import PromptSampler
from rlvr.rollout.runner import Rollout


@dataclass
class _Ready:
    rollout: Rollout
    sampler_state: dict[str, int]
    version: int
    generator_wait: float


class RolloutPipeline:
    """Hands the trainer step ``s``'s rollout (:meth:`take`), produced ahead by a thread.

    ``produce(step)`` runs one step's rollout with ``producer_sampler``, the pipeline's own copy
    of the prompt order; ``consumed`` is the trainer's sampler (the one checkpoints save).
    """

    def __init__(
        self,
        produce: Callable[[int], Rollout],
        generator: Generator,
        *,
        max_staleness: int,
        first_step: int,
        last_step: int,
        producer_sampler: PromptSampler,
        consumed: PromptSampler,
        all_ranks_done: Callable[[], None] = lambda: None,
    ) -> None:
        if max_staleness < 1:
            raise ValueError(f"max_staleness must be >= 1 (got {max_staleness})")
        self.produce = produce
        self.generator = generator
        self.k = max_staleness
        self.last_step = last_step
        self.producer_sampler = producer_sampler
        self.consumed = consumed
        #: several ranks: returns once every rank's trainer got here (a barrier)
        self.all_ranks_done = all_ranks_done
        #: the weights the generator holds: the step whose update made them.
        self.version = first_step - 1
        self.first_step = first_step
        self._next = first_step
        #: the step whose rollout runs now (None: none)
        self._running: int | None = None
        self._in_flight_updates = bool(getattr(generator, "takes_weights_in_flight", False))
        self._ready: dict[int, _Ready] = {}
        self._error: BaseException | None = None
        self._closed = False
        self._weights = threading.Lock()  # a rollout, a weight update or an eval: one at a time
        self._state = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="rlvr-rollouts", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ trainer side

    def take(self, step: int) -> tuple[Rollout, dict[str, float]]:
        """Step ``step``'s rollout, waiting for it if needed, and its ``staleness`` and
        ``wait/`` metrics. Raises what the producer raised."""
        began = time.perf_counter()
        with self._state:
            while step not in self._ready and self._error is None:
                self._state.wait()
            if self._error is not None:
                raise self._error
            ready = self._ready.pop(step)
            self._state.notify_all()
        self.consumed.load_state_dict(ready.sampler_state)
        return ready.rollout, {
            "staleness": float(step - 1 - ready.version),
            "wait/trainer": time.perf_counter() - began,
            "wait/generator": ready.generator_wait,
        }

    def sync_weights(self, policy: Any) -> tuple[float, float]:
        """Hand the generator the weights of the update just made (the next version), once the
        rollout in flight, if any, has finished on the old ones; returns the seconds waited and
        the seconds the generator took to take them."""
        began = time.perf_counter()
        with self._state:
            # Every step that samples from the current weights goes first (the next k).
            while not self._closed and self._error is None and not self._produced(self.version):
                if self._in_flight_updates and self._running == self._last_of(self.version):
                    break  # the last of them has started: the generator pauses it
                self._state.wait()
        if self._error is None:  # (after an error this rank stops; torchrun ends the others)
            self.all_ranks_done()  # every rank's rollouts from the old weights, too
        lock = contextlib.nullcontext() if self._in_flight_updates else self._weights
        with lock:
            waited = time.perf_counter() - began
            self.generator.sync_weights(policy)
            with self._state:
                self.version += 1
                self._state.notify_all()
        return waited, time.perf_counter() - began - waited

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the generator (and the rewards) for the trainer, e.g. for an eval: no rollout
        runs meanwhile."""
        with self._weights:
            yield

    def close(self) -> None:
        """Stop producing and wait for the thread: it ends once a rollout in flight does."""
        with self._state:
            self._closed = True
            self._state.notify_all()
        self._thread.join()

    # ------------------------------------------------------------------ producer side

    def _may_start(self, step: int) -> bool:
        """Step ``step`` samples from the weights of step ``step - 1 - k`` (the initial ones
        for the first steps): are they the generator's?"""
        return self.version == max(step - 1 - self.k, self.first_step - 1)

    def _last_of(self, version: int) -> int:
        """The last step that samples from ``version``."""
        return min(version + 1 + self.k, self.last_step)

    def _produced(self, version: int) -> bool:
        """Every step that samples from ``version`` has its rollout."""
        return self._next > self._last_of(version)

    def _run(self) -> None:
        try:
            while True:
                began = time.perf_counter()
                with self._state:
                    while (
                        not self._closed
                        and self._next <= self.last_step
                        and not self._may_start(self._next)
                    ):
                        self._state.wait()
                    if self._closed or self._next > self.last_step:
                        return
                    step = self._next
                with self._weights:
                    waited = time.perf_counter() - began
                    with self._state:
                        version, self._running = self.version, step
                        self._state.notify_all()
                    rollout = self.produce(step)
                    for c in rollout.generated:  # guides were never sampled
                        c.policy_version = version
                    state = self.producer_sampler.state_dict()
                with self._state:
                    self._ready[step] = _Ready(rollout, state, version, waited)
                    self._next, self._running = step + 1, None
                    self._state.notify_all()
        except BaseException as exc:  # handed to the trainer, which raises it in take()
            with self._state:
                self._error = exc
                self._state.notify_all()


__all__ = ["RolloutPipeline"]
