"""The training loop: config -> plugins -> rollout -> rewards -> advantages -> loss -> update.

:class:`Trainer` is one run (:func:`rlvr.training.launch.run` runs it). Its parts are built by
:mod:`rlvr.training.setup`, a step is computed by :class:`~rlvr.training.step.StepRunner`, and
after each step the loop asks small policies whether to evaluate (:class:`~rlvr.training.
in_training_eval.EvalSchedule`), save (the :class:`~rlvr.training.checkpointer.Checkpointer`,
built from the run's stateful pieces) and stop (:class:`~rlvr.training.stopping.StopReasons`).
A step that raises before its first update is forgotten (the run saved at the step before);
broken weights are never saved. Every rank decides alike; rank 0 alone writes files.
"""

from __future__ import annotations

import logging
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import set_seed

from rlvr.api.errors import TrainingError
from rlvr.api.host import PluginHost, build_algorithm
from rlvr.config.schema import RunConfig, requirements
from rlvr.data.prompts import PromptSampler
from rlvr.outputs.metrics_compute import eval_metrics
from rlvr.outputs.metrics_logger import MetricsLogger
from rlvr.parallel import distributed
from rlvr.rewards.failures import RewardError
from rlvr.rewards.pool import ScoringAbandoned
from rlvr.rollout.runner import EpisodeFailures, step_sample_records
from rlvr.training import memory, setup
from rlvr.training.callbacks import Callbacks
from rlvr.training.checkpointer import OPTIMIZER
from rlvr.training.collapse import CollapseGuard, warning_text
from rlvr.training.in_training_eval import EvalSchedule, KeepBest, eval_accuracy, failed_eval
from rlvr.training.models import load_run_models
from rlvr.training.stateful import Stateful
from rlvr.training.stopping import (
    BadSteps,
    Discarded,
    StopFlag,
    StopReasons,
    TimeBudget,
    close_all,
    discarded,
    planned_steps,
)
from rlvr.training.update import WeightsError

logger = logging.getLogger("rlvr.training.trainer")

# --------------------------------------------------------------------------- the trainer


class Trainer:
    """One training run; :func:`train` builds and runs it. Its own counters (step, bad steps,
    last metrics) are a stateful piece of its checkpoints (:meth:`state_dict`)."""

    def __init__(
        self,
        config: RunConfig,
        host: PluginHost,
        *,
        resume: bool = False,
        progress: bool = True,
        rows: list[dict[str, Any]] | None = None,
        eval_rows: list[dict[str, Any]] | None = None,
        callbacks: Sequence[Any] = (),
    ):
        self.config = config
        self.extra_callbacks = list(callbacks)  # a script's objects (rlvr.Trainer(callbacks=))
        self.callbacks = Callbacks()  # built in setup(), on rank 0
        self.stopped: str | None = None  # why the run stopped early (None: it finished)
        self.rows, self.eval_rows = rows, eval_rows  # given in memory, instead of data.path
        self.host = host
        self.t = config.training
        # Training needs every section (load_config(require=...) reports a missing one).
        self.model_cfg = setup.section(config.model, "model")
        self.data_cfg = setup.section(config.data, "data")
        self.algorithm_cfg = setup.section(config.algorithm, "algorithm")
        self.backend_cfg = setup.section(config.backend, "backend")
        self.resume, self.progress = resume, progress
        self.output_dir = Path(self.t.output_dir)
        #: what the algorithm needs, from its record (the one source rlvr validate checks too).
        self.req = requirements(config, host)
        self.step = 0
        self.bad_steps = BadSteps(self.t.max_bad_steps)
        self.last_metrics: dict[str, Any] = {}
        self._closers: list[Any] = []
        self._step_start = (0, 0)
        self._stop: StopFlag | None = None  # while run() runs
        self._failed_eval: str | None = None  # see _stop_if_eval_failed
        self.dist = distributed.current()
        self.log: MetricsLogger | None = None
        self.budget = TimeBudget(self.t.max_minutes)  # counts from here, loading included
        self.guard = CollapseGuard(self.t.collapse)
        self.keep_best = KeepBest(self.t.keep_best)

    # ------------------------------------------------------------------ setup

    def setup(self) -> None:
        """Everything before the first step, cheap checks first, models last."""
        t, config = self.t, self.config
        resume_from = setup.claim_output_dir(
            config, self.host, self.output_dir, self.resume, self.dist, self._closers
        )

        rows, eval_rows = setup.checked_rows(config, self.host, self.rows, self.eval_rows)
        self.scorer, self.reward_errors = setup.scoring(
            config, self.host, self.output_dir if self.dist.is_main else None, self._echo
        )
        self._closers.append(self.scorer)
        self.labels = [e.label for e in self.reward_errors.entries]
        # The whole step's prompts, over every rank (each generates for its share).
        self.prompts_per_step = (
            t.per_device_train_batch_size * t.gradient_accumulation_steps * self.dist.world_size
        )
        self.max_steps = planned_steps(t, len(rows), self.dist.world_size)

        set_seed(t.seed)
        run, device, dtype = setup.run_info(config, self.host, self.max_steps, self.dist)
        self.run_info = run
        record = self.host.algorithms[self.algorithm_cfg.name]
        self.algo = build_algorithm(record, self.algorithm_cfg.params, run, self.req)
        if self.dist.is_main:  # callbacks observe the run where its files are written
            self.callbacks = Callbacks.build(config, self.host, run, self.extra_callbacks)

        models = load_run_models(
            self.model_cfg,
            t,
            self.req,
            self.algo,
            self.dist,
            device=device,
            dtype=dtype,
            resume_from=resume_from,
        )
        self.policy, self.tokenizer, self.pad_id = models.policy, models.tokenizer, models.pad_id
        prompts = setup.prompt_set(rows, self.data_cfg, self.tokenizer, t.max_prompt_length)
        self.sampler = PromptSampler(len(rows), seed=t.seed, shuffle=self.data_cfg.shuffle)
        self.evaluation = setup.evaluation(config, self.host, eval_rows, self.tokenizer)
        every = t.eval_steps if self.evaluation is not None else None
        self.eval_schedule = EvalSchedule(every, self.max_steps, on_start=t.eval_on_start)
        self.update = setup.policy_update(
            config, models, self.algo, self.req, self.dist, self.max_steps, device, dtype
        )
        self.checkpointer = setup.checkpointer(
            config,
            self.dist,
            self.update,
            self.tokenizer,
            progress=self,
            pieces=self.stateful(),
            facts={"max_steps": self.max_steps, "prompts_per_step": self.prompts_per_step},
        )
        if resume_from is not None:
            self._resume_from(resume_from)

        self.generator = setup.generator(config, self.host, run, self.policy, self.tokenizer)
        self._closers.append(self.generator)
        self.stepper = setup.step_runner(
            config,
            self.host,
            run,
            generator=self.generator,
            scorer=self.scorer,
            reward_errors=self.reward_errors,
            prompts=prompts,
            sampler=self.sampler,
            models=models,
            update=self.update,
            algorithm=self.algo,
            dist=self.dist,
            prompts_per_step=self.prompts_per_step,
            start_step=self.step,
        )
        self.rollout_runner = self.stepper.rollout_runner
        self._closers.append(self.stepper)  # first to close (and its episodes' runner)
        if self.dist.is_main:  # rank 0 alone writes the run's files
            self.log = setup.metrics_log(
                config, self.max_steps, self.step, self.progress, self.rollout_runner.episodes
            )
            self._closers.append(self.log)
            self.callbacks.call(
                "on_run_start",
                run=run,
                output_dir=self.output_dir,
                config=config.model_dump(mode="json"),
                start_step=self.step,
            )

    def stateful(self) -> dict[str, dict[str, Stateful]]:
        """The run's pieces its checkpoints keep, by name: ``state`` in ``trainer_state.json``,
        ``tensors`` each in ``<name>.pt``. A piece added here is saved and resumed."""
        update = self.update
        tensors: dict[str, Stateful] = {OPTIMIZER: update.optimizer, "scheduler": update.scheduler}
        if update.value_model is not None:
            tensors["value_model"] = update.value_model
        state: dict[str, Stateful] = {"data": self.sampler, "collapse": self.guard}
        state["time_budget"] = self.budget
        return {"state": state, "tensors": tensors}

    def state_dict(self) -> dict[str, Any]:
        """The trainer's own counters (the top level of ``trainer_state.json``)."""
        return {"step": self.step, "bad_steps": self.bad_steps.count, "metrics": self.last_metrics}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.bad_steps.count = int(state.get("bad_steps", 0))
        self.last_metrics = dict(state.get("metrics") or {})

    def _resume_from(self, path: Path) -> None:
        self.checkpointer.restore(path)
        self.reward_errors.resume(self.step)  # cut back, as the metrics are
        self.keep_best.resumed(self.output_dir, self.step)
        if self.dist.is_main:
            at = f"step {self.step} of {self.max_steps}"
            print(f"rlvr: resuming from {path} ({at})", file=sys.stderr, flush=True)

    def _log(self, m: dict[str, Any]) -> None:
        """One metrics line: to metrics.jsonl and the console, then to the callbacks."""
        if self.log is None:
            return
        self.log.log(m)
        self.callbacks.call("on_log", step=m["step"], metrics=m)
        if any(k.startswith("eval/") for k in m):
            self.callbacks.call("on_evaluate", step=m["step"], metrics=m)

    def _stop_if_eval_failed(self) -> None:
        """Once an eval's line is written: its failed episodes stop the run (every rank), the
        step it followed saved (:func:`~rlvr.training.in_training_eval.failed_eval`)."""
        if self._failed_eval is not None:
            if self.step > 0:
                self._save_unless_saved()
            raise EpisodeFailures(self._failed_eval)

    # ------------------------------------------------------------------ one step

    def train_step(self) -> dict[str, Any]:
        """One step (:class:`~rlvr.training.step.StepRunner`), then its bookkeeping: bad steps,
        the eval when due, the metrics line, the samples."""
        self.step += 1
        m, ro, batch = self.stepper.run(self.step, self._stop_requested)
        self.bad_steps.observe(self.step, m["skipped"])
        if self.eval_schedule.should_evaluate(self.step):
            m.update(self.evaluate())
        self._log(m)
        self.last_metrics = m
        if self.step % self.t.log_samples_steps == 0 or self.step == 1:
            mine = step_sample_records(
                ro, batch.advantages, self.rollout_runner.prompts, self.data_cfg.prompt_field
            )
            records = self.dist.gather(mine)
            if self.log is not None:
                self.log.log_samples(self.step, [r for part in records for r in part])
        memory.return_freed_memory()
        return m

    def evaluate(self) -> dict[str, Any]:
        """The current policy on the eval split, as ``eval/...`` metrics (every rank gets
        them; each generated its share of the prompts)."""
        assert self.evaluation is not None
        caps = self.host.backends[self.backend_cfg.name].capabilities
        began = self.budget.now()
        self.policy.eval()
        # FSDP: whole weights while generating; asynchronous rollouts: none meanwhile.
        with distributed.gathered(self.policy), self.stepper.exclusive():
            _, summary = self.evaluation.run(
                self.generator,
                self.scorer,
                backend=self.backend_cfg.name,
                schedules_batches=caps.schedules_batches,
                dist=self.dist,
                reward_errors=self.reward_errors,
                step=self.step,
            )
            # the generator's own metrics (prefix-cache hits) are a step's: the eval's dropped
            getattr(self.generator, "take_metrics", dict)()
        self.budget.eval_took(self.budget.now() - began)
        env = self.config.environment.name if self.config.environment else "?"
        self._failed_eval = failed_eval(summary, self.t.max_failed_episode_frac, self.step, env)
        return eval_metrics(summary)

    def _stop_requested(self) -> bool:
        return self._stop is not None and self._stop.requested

    def _echo(self, message: str) -> None:
        if self.log is not None:
            self.log.write(message)
        else:  # a rank without the run's log (rank > 0, or before setup finished)
            print(f"[rank {self.dist.rank}] {message}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ saving

    def save(self) -> Path:
        """Checkpoint the current step (:class:`~rlvr.training.checkpointer.Checkpointer`)."""
        # Never a checkpoint to resume from with broken weights, whatever brought them here
        # (the update checks its own steps, PolicyUpdate._check_weights).
        if not math.isfinite(self.update.weights_norm()):
            raise TrainingError(
                f"not saving checkpoint-{self.step}: the trained weights are not finite; "
                f"{self.checkpointer.resumes()}"
            )
        path = self.checkpointer.save(self.step)
        self.callbacks.call("on_save", step=self.step, checkpoint=path)
        return path

    def _save_unless_saved(self) -> None:
        if not self.checkpointer.saved(self.step):
            self.save()

    # ------------------------------------------------------------------ the loop

    def run(self) -> dict[str, Any]:
        try:
            self.setup()
            if self.step == 0 and self.eval_schedule.should_evaluate(0):  # the baseline
                m = {"step": 0, **self.evaluate()}
                self._log(m)
                self._stop_if_eval_failed()
                self.guard.observe_eval(0, eval_accuracy(m))
            with StopFlag() as stop:
                self._stop = stop
                # a scoring round that hangs past a stop request is abandoned, not waited for
                self.scorer.pool.stop_requested = lambda: stop.requested
                while self.step < self.max_steps:
                    if not self._checked_step(stop):  # discarded on a requested stop
                        return self.last_metrics
                    self._stop_if_eval_failed()
                    self.callbacks.call("on_step_end", step=self.step, metrics=self.last_metrics)
                    if self.bad_steps.too_many():
                        raise self.bad_steps.error(self.step, self.save())
                    if self.checkpointer.should_save(self.step):
                        self.save()
                    reasons = self._stop_reasons(stop)
                    if self.dist.any(reasons.any()):  # every rank stops at the same step
                        self._stop_early(reasons)
                        return self.last_metrics
                self._save_unless_saved()
            return self.last_metrics
        finally:
            self.close()

    def _checked_step(self, stop: StopFlag) -> bool:
        """:meth:`train_step`, and what a step that raises leaves: nothing to save when the
        weights are broken, else the run saved at the step before it. False: the step was
        discarded on a requested stop (saved and said so), and the run ends."""
        self._step_start = (self.step, self.sampler.position)
        self.update.stepped = False
        self.budget.step_began()
        try:
            self.train_step()
        except WeightsError as exc:  # the weights are lost: nothing to save
            raise TrainingError(f"step {self.step}: {exc}; {self.checkpointer.resumes()}") from None
        except BaseException as exc:  # Ctrl-C, nothing to train on, out of memory...
            step = self.step
            # rewards that failed on the way to a requested stop: stop there
            discard = stop.requested and isinstance(exc, Discarded | RewardError | ScoringAbandoned)
            self._save_after_interrupt(announce=not discard)
            if discard:
                if self.log is not None:
                    saved = self.checkpointer.saved(self.step) and self.step > 0
                    self.log.write(discarded(self.step, step, exc, saved, self.output_dir))
                return False
            raise
        return True

    def _stop_reasons(self, stop: StopFlag) -> StopReasons:
        """After a step: keep the best checkpoint, ask the collapse guard, the callbacks and
        the time budget."""
        collapsed = self._watch(self.last_metrics)
        asked = self.callbacks.control.stop_reason
        self.budget.step_ended()
        out_of_time = self.step < self.max_steps and self.budget.out_of_time()
        return StopReasons(stop.requested, collapsed, asked, out_of_time)

    def _stop_early(self, reasons: StopReasons) -> None:
        """Save, and say why the run stopped (a stop on time ends with the run's last eval)."""
        self._save_unless_saved()
        if reasons.first() == "out_of_time" and self.eval_schedule.at_early_stop(self.step):
            self._log({"step": self.step, **self.evaluate()})
            self._stop_if_eval_failed()
        why = reasons.why(self.budget)
        self.stopped = why.strip(" ()") or "a stop request"
        if self.log is not None:
            self.log.write(
                f"stopped at step {self.step}{why}; continue with --resume "
                f"(checkpoint in {self.output_dir})"
            )

    def _watch(self, m: dict[str, Any]) -> bool:
        """After a step: keep the best checkpoint (``training.keep_best``) and ask the collapse
        guard; True when it tripped and ``training.collapse.action`` is stop."""
        best = self.keep_best.improved(m)
        if best is not None:
            self._save_unless_saved()
            if self.dist.is_main:
                self.keep_best.record(self.output_dir, self.step, m, best)
        found = self.guard.observe(self.step, m, eval_accuracy(m))
        if found is None:
            return False
        action = self.t.collapse.action
        if self.dist.is_main:
            self._echo(f"warning: {warning_text(found, action)}")
        return action == "stop"

    def _save_after_interrupt(self, announce: bool = True) -> None:
        """A step that did not finish (Ctrl-C, an error): before any weight changed, forget
        the step (its prompts are handed out again on resume) and save; during the update the
        state is half-way, so the last checkpoint stays the one to resume from. With several
        ranks nothing is saved: the other ranks may never reach the save's collectives."""
        if self.dist.enabled:
            logger.error(
                "rank %d stopped in step %d; --resume continues from the last checkpoint (step %s)",
                self.dist.rank,
                self.step,
                self.checkpointer.last_saved,
            )
            return
        if self.update.stepped:
            logger.warning(
                "step %d stopped during its update: no checkpoint saved; --resume continues "
                "from the last one (step %s)",
                self.step,
                self.checkpointer.last_saved,
            )
            return
        self.step, self.sampler.position = self._step_start
        if self.step > 0 and not self.checkpointer.saved(self.step):
            try:
                path = self.save()
            except Exception as exc:  # e.g. out of memory or disk: the original error matters
                logger.warning("could not save a checkpoint at step %d: %s", self.step, exc)
                return
            if self.log is not None and announce:
                self.log.write(f"stopped; saved {path}; continue with --resume")

    def close(self) -> None:
        close_all(self._closers)


__all__ = ["Trainer", "TrainingError"]
