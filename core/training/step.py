"""One step's computation: rollout -> no-grad passes -> ``prepare`` -> updates -> metrics.

:class:`StepRunner` runs it on every rank and returns the step's metrics (reduced over the
ranks), its rollout and its batch; what the loop does around it (counting bad steps, the eval,
logging, saving, stopping) is :class:`rlvr.training.trainer.Trainer`'s.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from transformers import set_seed

from rlvr.api.runtime import RolloutBatch
from rlvr.outputs.metrics_compute import reduce_metrics
from rlvr.parallel import distributed
from rlvr.parallel.distributed import Dist
from rlvr.rollout.batch import build_batch
from rlvr.rollout.pipeline import RolloutPipeline
from rlvr.rollout.runner import Rollout, RolloutRunner, step_seed
from rlvr.training.micro_batches import without_environment_tokens
from rlvr.training.step_metrics import step_metrics
from rlvr.training.stopping import Discarded
from rlvr.training.update import PolicyUpdate


@dataclass
class StepRunner:
    """The parts one step uses. ``gather``: the backend samples from the policy itself, so an
    FSDP policy's weights are gathered whole while it generates."""

    update: PolicyUpdate
    rollout_runner: RolloutRunner
    algorithm: Any
    algorithm_name: str
    generator: Any
    labels: list[str]
    pad_id: int
    seed: int
    prompts_per_step: int
    max_steps: int
    dist: Dist
    gather: bool
    #: ``training.max_staleness`` >= 1: the rollouts come from a producer thread
    #: (:mod:`rlvr.rollout.pipeline`); None: each step samples when it starts.
    pipeline: RolloutPipeline | None = None

    def rollout(self, step: int) -> Rollout:
        """Step ``step``'s rollout, seeded as every run seeds it."""
        set_seed(step_seed(self.seed, step, 1_000_000))
        ro = self.rollout_runner.run(step, self.prompts_per_step, self.max_steps)
        take_metrics = getattr(self.generator, "take_metrics", None)
        if take_metrics is not None:
            ro.backend_metrics = dict(take_metrics())
        return ro

    def sync_weights(self, policy: Any) -> tuple[float, float]:
        """The generator takes the updated weights (through the pipeline, when there is one);
        returns the seconds it waited for a rollout in flight to finish, and the seconds the
        generator took them in."""
        if self.pipeline is None:
            began = time.perf_counter()
            self.generator.sync_weights(policy)
            return 0.0, time.perf_counter() - began
        return self.pipeline.sync_weights(policy)

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        """The generator and the rewards to the trainer alone (an eval), no rollout meanwhile."""
        return self.pipeline.exclusive() if self.pipeline else contextlib.nullcontext()

    def close(self) -> None:
        """The producer thread first (its rollouts use the rest), then the episodes' runner."""
        try:
            if self.pipeline is not None:
                self.pipeline.close()
        finally:
            if self.rollout_runner.episodes is not None:
                self.rollout_runner.episodes.close()

    def run(
        self, step: int, stopping: Callable[[], bool]
    ) -> tuple[dict[str, Any], Rollout, RolloutBatch]:
        """Step ``step``. ``stopping()``: has a stop been requested (asked once the rollout is
        scored)? Then a step whose reward calls failed is
        :class:`~rlvr.training.stopping.Discarded` (on every rank, or none)."""
        start, cpu_start = time.perf_counter(), time.process_time()
        update, policy = self.update, self.update.policy
        policy.eval()
        pipelined: dict[str, float] = {}
        if self.pipeline is not None:
            ro, pipelined = self.pipeline.take(step)
        else:
            with (
                distributed.gathered(policy) if self.gather else contextlib.nullcontext(),
                update.clock("generation"),
            ):
                ro = self.rollout(step)
        failed = sum(s.errors + s.timeouts for s in ro.summary.values())
        if self.dist.any(stopping() and failed > 0):  # every rank discards, or none
            raise Discarded(
                f"{failed} reward calls failed after the stop was requested (a signal to the "
                "process group reaches the rewards' own processes too)"
            )

        t0 = time.perf_counter()
        batch = build_batch(ro.kept, self.labels, self.pad_id, step).to(update.device)
        with update.clock("no_grad"):
            batch = update.fill_no_grad(batch)
        batch, prep_metrics = self.algorithm.prepare(batch)
        batch = without_environment_tokens(batch)
        lr = update.optimizer.param_groups[0]["lr"]
        updates = [update.update(batch, first=i == 0) for i in range(update.updates_per_step)]
        synced_after, sync_time = self.sync_weights(policy)
        t1 = time.perf_counter()
        if pipelined:
            pipelined["wait/trainer"] += synced_after

        m = (
            step_metrics(
                step=step,
                algorithm=self.algorithm_name,
                rollout=ro,
                prepare_metrics=prep_metrics,
                updates=updates,
                learning_rate=lr,
                num_tokens=int(batch.completion_mask.sum().item()),
                step_time=time.perf_counter() - start,
                training_time=t1 - t0,
                cpu_time=time.process_time() - cpu_start,
            )
            | update.clock.take()
            | ro.episode_metrics
            | ro.backend_metrics
            | pipelined
            | {"weight_sync_time": sync_time}
        )
        return self._reduce(ro, m), ro, batch

    def _reduce(self, ro: Rollout, m: dict[str, Any]) -> dict[str, Any]:
        """The step's metrics over every rank (the same dict on each)."""
        if not self.dist.enabled:
            return m
        parts = self.dist.gather((m, len(ro.generated)))
        return reduce_metrics([p[0] for p in parts], [p[1] for p in parts])


__all__ = ["StepRunner"]
