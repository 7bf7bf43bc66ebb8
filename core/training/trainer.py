"""The training loop: config -> plugins -> rollout -> rewards -> advantages -> loss -> update.

:func:`train` is the whole public API. The trainer knows plugins only through their records
(:mod:`rlvr.api.registration`) and the runtime protocols (:mod:`rlvr.api.runtime`); each part of a
step
lives in a module named for its job:

0. setup: the models (:mod:`rlvr.training.models`) and, on ``--resume``, the checkpoint's optimizer,
   RNG and trainer state (:mod:`rlvr.outputs.resume`);
1. rollout (:mod:`rlvr.rollout.runner`): generate, score and select the step's groups;
2. :mod:`rlvr.training.update`: old/reference log-probs and old values (only those the algorithm's
   requirements ask for), then ``algorithm.prepare`` (advantages), then ``num_iterations``
   optimizer updates through ``algorithm.loss``;
3. metrics (:func:`rlvr.training.step_metrics.step_metrics`), samples, a checkpoint every
   ``save_steps``;
   the backend gets the new weights;
4. every ``eval_steps`` (and at the last step; at step 0 too with ``eval_on_start``): the eval
   split, judged as ``rlvr eval`` judges it (:class:`rlvr.evaluation.loop.Evaluation`), logged
   as
   ``eval/...`` on the step's line of ``metrics.jsonl``. Its sampling seeds are its own and the
   RNGs are reseeded at every step, so a run with evaluation trains exactly as one without.

Reproducibility: the RNGs are reseeded at the start of every step from ``(seed, step)`` and the
backend gets a per-step (and per-round) sampling seed, so a step's randomness does not depend
on what ran before it; the data order is a seeded permutation per epoch whose position is
checkpointed. A run interrupted and resumed therefore logs the same metrics as an
uninterrupted one (on CPU, up to timing fields).

Stopping: Ctrl-C or SIGTERM finishes the step, saves a checkpoint and returns (the reward
workers let both pass, :mod:`rlvr.rewards.pool`, so a signal to the whole process group does not
fail the step's reward calls; a step whose reward calls failed all the same once the stop was
asked for, e.g. a reward's own subprocess got the signal, or still scoring a few seconds after
it, :data:`~rlvr.rewards.pool.STOP_GRACE`, e.g. a reward that hangs, is discarded, not trained
on); so does
``max_minutes``, before a step that would end past the budget, keeping room for the eval (when
``eval_steps`` is set) that it then runs on the last step, as at a run's planned end. A step that
raises (a second Ctrl-C, an error) before its first optimizer update is forgotten and the run
saved at the step before it; a non-finite loss or gradient norm skips the update, and
``max_bad_steps`` of them in a row save a checkpoint and stop with :class:`TrainingError`. An
update that makes the weights non-finite or blows them up (:class:`~rlvr.training.update.
WeightsError`) stops the run without saving, and no save ever writes non-finite weights.
A step whose dynamic sampling kept no group trains on nothing (no weight changes) and the run
goes on. Rewards that fail more than the config allows (:mod:`rlvr.rewards.failures`, reported as
each round is scored) stop the step the same way: the run is saved at the last finished step;
so does an environment that fails more than ``training.max_failed_episode_frac`` of a step's
episodes (:class:`~rlvr.rollout.runner.EpisodeFailures`), before the step trains on anything.

Data parallelism: launched by ``torchrun`` the same run spreads over ranks
(:mod:`rlvr.parallel.distributed`): each step takes ``per_device_train_batch_size x
gradient_accumulation_steps x world_size`` prompts, rank 0 alone writes metrics and
checkpoints, and a checkpoint resumes only on the world size that wrote it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from transformers import set_seed

from rlvr.api.errors import ConfigWarning, RlvrError, TrainingError
from rlvr.api.host import Host, build_algorithm, build_generator
from rlvr.api.runtime import RunInfo
from rlvr.config.schema import RunConfig, dump, multi_turn, requirements
from rlvr.data.prompts import (
    PromptSampler,
    PromptSet,
    data_source,
    load_rows,
    require_fields,
)
from rlvr.evaluation.loop import Evaluation
from rlvr.evaluation.paths import eval_prompt_rows
from rlvr.model.loading import busy_cpu_warning, eos_token_ids, resolve_device_dtype
from rlvr.outputs import checkpoint as ckpt
from rlvr.outputs import rundir
from rlvr.outputs.metrics import ENV_ERRORS_FILE
from rlvr.outputs.metrics_compute import eval_metrics, reduce_metrics
from rlvr.outputs.metrics_logger import MetricsLogger
from rlvr.outputs.resume import check_config, restore, resume_point
from rlvr.outputs.summary import format_summary, summary_data, write_summary
from rlvr.parallel import distributed
from rlvr.rewards.failures import RewardError, RewardErrorLog
from rlvr.rewards.pool import ScoringAbandoned
from rlvr.rewards.scoring import Scorer, score_entries
from rlvr.rollout.episodes import EpisodeRunner, episode_runner
from rlvr.rollout.guidance import Guides
from rlvr.rollout.runner import (
    Rollout,
    RolloutRunner,
    build_batch,
    step_sample_records,
    step_seed,
)
from rlvr.training import memory
from rlvr.training.callbacks import Callbacks, ReportError, unavailable
from rlvr.training.collapse import Collapse, CollapseGuard, warning_text
from rlvr.training.micro_batches import without_environment_tokens
from rlvr.training.models import load_run_models
from rlvr.training.step_metrics import step_metrics
from rlvr.training.stopping import Discarded, StopFlag, TimeBudget, planned_steps
from rlvr.training.update import PolicyUpdate, WeightsError

logger = logging.getLogger("rlvr.training.trainer")

_T = TypeVar("_T")


def _seed_everything(seed: int) -> None:
    set_seed(seed)


@contextlib.contextmanager
def _shown_by_validation() -> Iterator[None]:
    """Without the config warnings that the validation every run starts with
    (:func:`rlvr.runs.train`, :class:`rlvr.Trainer`) has shown: the data's and the eval's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        yield


def _section(value: _T | None, name: str) -> _T:
    if value is None:
        raise TrainingError(f"the config has no {name!r} section; training needs one")
    return value


# --------------------------------------------------------------------------- the trainer


class Trainer:
    """One training run; :func:`train` builds and runs it."""

    def __init__(
        self,
        config: RunConfig,
        host: Host,
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
        self.model_cfg = _section(config.model, "model")
        self.data_cfg = _section(config.data, "data")
        self.algorithm_cfg = _section(config.algorithm, "algorithm")
        self.backend_cfg = _section(config.backend, "backend")
        self.resume = resume
        self.progress = progress
        self.output_dir = Path(self.t.output_dir)
        #: what the algorithm needs, from its record (the one source rlvr validate checks too).
        self.req = requirements(config, host)
        self.step = 0
        self.bad_steps = 0
        self.last_metrics: dict[str, Any] = {}
        self._last_saved: int | None = None
        self._closers: list[Any] = []
        self._step_start = (0, 0)
        self._stop: StopFlag | None = None  # while run() runs
        self.dist = distributed.current()
        self.log: MetricsLogger | None = None
        self.evaluation: Evaluation | None = None
        self.budget = TimeBudget(self.t.max_minutes)  # counts from here, loading included
        self.guard = CollapseGuard(self.t.collapse)
        self.best: float | None = None  # training.keep_best: the best in-training eval so far

    # ------------------------------------------------------------------ setup

    def setup(self) -> None:
        """Everything before the first step, cheap checks first, models last."""
        t, config = self.t, self.config
        missing = unavailable(config, self.host)
        if missing:  # a logger's missing package fails now, not after loading
            raise ReportError("; ".join(f"{path} {why}" for path, why in missing))
        resume_from = self._take_output_dir()
        if resume_from is not None:  # before anything loads: a changed model stops here
            check_config(resume_from, dump(config), warn=self.dist.is_main)
        if self.dist.is_main:
            ckpt.clean_leftovers(self.output_dir)
        self.dist.barrier()  # no rank sees files rank 0 writes before every rank checked

        rows = self.rows if self.rows is not None else load_rows(self.data_cfg)
        require_fields(
            rows,
            config.rewards,
            self.host,
            prompt_field=self.data_cfg.prompt_field,
            guide_field=t.guidance.field if t.guidance is not None else None,
            source="the dataset" if self.rows is not None else data_source(self.data_cfg),
        )
        eval_rows = None
        if t.eval_steps is not None and self.eval_rows is not None:
            limited = self.eval_rows[: t.eval_limit]
            require_fields(
                limited,
                config.rewards,
                self.host,
                prompt_field=self.data_cfg.prompt_field,
                source="the eval dataset",
            )
            eval_rows = (limited, self.data_cfg, None, "eval_dataset")
        elif t.eval_steps is not None:  # the eval data is checked before any model loads
            with _shown_by_validation():
                eval_rows = eval_prompt_rows(config, self.host, None, t.eval_limit)
        entries = score_entries(config, self.host)
        self.labels = [e.label for e in entries]
        # Started before the models load, so the workers build their rewards meanwhile.
        self.scorer = Scorer(entries, workers=t.reward_workers)
        self._closers.append(self.scorer)
        self.reward_errors = RewardErrorLog(
            entries,
            self.output_dir if self.dist.is_main else None,  # one file: rank 0's
            max_error_frac=t.max_reward_error_frac,
            echo=self._echo,
        )

        # The whole step's prompts, over every rank (each generates for its share).
        self.prompts_per_step = (
            t.per_device_train_batch_size * t.gradient_accumulation_steps * self.dist.world_size
        )
        self.max_steps = planned_steps(t, len(rows), self.dist.world_size)

        _seed_everything(t.seed)
        device, dtype = resolve_device_dtype(self.model_cfg.dtype)
        # Built (and checked against its protocol) before any model loads.
        run = RunInfo.from_config(
            config,
            max_steps=self.max_steps,
            device=device,
            dtype=dtype,
            multi_turn=multi_turn(config, self.host),
        )
        if self.dist.is_main:  # auto depends on the machine: say what it chose
            print(
                f"rlvr: {run.device}, computing in {run.dtype} "
                f"(model.dtype: {self.model_cfg.dtype})",
                file=sys.stderr,
                flush=True,
            )
            if device.type == "cpu" and (busy := busy_cpu_warning()):
                print(f"rlvr: warning: {busy}", file=sys.stderr, flush=True)
        record = self.host.algorithms[self.algorithm_cfg.name]
        self.algo = build_algorithm(record, self.algorithm_cfg.params, run, self.req)
        if self.dist.is_main:  # callbacks observe the run where its files are written
            self.callbacks = Callbacks.build(config, self.host, run, self.extra_callbacks)
        self.run_info = run

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
        with _shown_by_validation():
            prompts = PromptSet(rows, self.data_cfg, self.tokenizer, t.max_prompt_length)
        self.sampler = PromptSampler(len(rows), seed=t.seed, shuffle=self.data_cfg.shuffle)
        if eval_rows is not None:
            rows_, eval_cfg, _, _ = eval_rows
            with _shown_by_validation():
                eval_prompts = PromptSet(rows_, eval_cfg, self.tokenizer, t.max_prompt_length)
            self.evaluation = Evaluation(
                config,
                eval_prompts,
                k=t.eval_num_generations,
                greedy=t.eval_sampling == "greedy",
                host=self.host,
            )

        self.updates_per_step = self.algo.num_iterations
        self.update = PolicyUpdate(
            policy=self.policy,
            reference=models.reference,
            reference_is_base=models.reference_is_base,
            value_model=models.value_model,
            algorithm=self.algo,
            old_logprobs=self.req.old_logprobs,
            training=t,
            device=device,
            dtype=dtype,
            total_updates=self.max_steps * self.updates_per_step,
            updates_per_step=self.updates_per_step,
            dist=self.dist,
        )

        if resume_from is not None:
            state = restore(
                resume_from,
                dist=self.dist,
                policy=self.policy,
                tokenizer=self.tokenizer,
                optimizer=self.update.optimizer,
                scheduler=self.update.scheduler,
                value_model=models.value_model,
                sharded=self.update.sharded,
                prompts_per_step=self.prompts_per_step,
                max_steps=self.max_steps,
            )
            self.step = self._last_saved = int(state["step"])
            self.bad_steps = int(state.get("bad_steps", 0))
            self.sampler.load_state_dict(state["data"])
            self.last_metrics = dict(state.get("metrics") or {})
            self.reward_errors.resume(self.step)  # cut back, as the metrics are
            self.guard.load_state_dict(state.get("collapse") or {})
            best = ckpt.best_checkpoint(self.output_dir)
            if best is not None and int(best["step"]) <= self.step:
                self.best = float(best["value"])
            if self.dist.is_main:
                print(
                    f"rlvr: resuming from {resume_from} (step {self.step} of {self.max_steps})",
                    file=sys.stderr,
                    flush=True,
                )

        backend = self.host.backends[self.backend_cfg.name]
        self.generator = build_generator(
            backend, self.backend_cfg.params, run, self.policy, self.tokenizer
        )
        self._closers.append(self.generator)
        episodes = self._episodes(run, prompts) if multi_turn(config, self.host) else None
        self.rollout_runner = RolloutRunner(
            generator=self.generator,
            scorer=self.scorer,
            reward_errors=self.reward_errors,
            prompts=prompts,
            sampler=self.sampler,
            labels=self.labels,
            pad_id=self.pad_id,
            training=t,
            backend=self.backend_cfg.name,
            select=self.algo.select,
            max_rounds=self.algo.max_generation_rounds,
            dist=self.dist,
            guides=self._guides(prompts),
            episodes=episodes,
        )
        if self.dist.is_main:  # rank 0 alone writes the run's files
            self._open_output()

    def _episodes(self, run: RunInfo, prompts: PromptSet) -> EpisodeRunner:
        """The runner of multi-turn episodes: the environment built and checked, its limits."""
        eos = eos_token_ids(self.policy, self.tokenizer)
        runner = episode_runner(self.config, self.host, run, self.generator, prompts, eos)
        self._closers.append(runner)
        return runner

    def _take_output_dir(self) -> Path | None:
        """Rank 0 locks the output directory for the life of the run and decides where the run
        starts (:func:`rlvr.outputs.resume.resume_point`); every rank gets its answer, or its
        error."""
        outcome: Path | RlvrError | None = None
        if self.dist.is_main:
            try:
                held = rundir.hold(self.output_dir)
                self._closers.append(held)  # the first in: released last
                try:
                    outcome = resume_point(self.output_dir, self.resume, held)
                except RlvrError:  # refused: the directory is left as it was found
                    self._closers.remove(held)
                    held.abandon()
                    raise
            except RlvrError as exc:
                outcome = exc
        if self.dist.enabled:
            outcome = self.dist.gather(outcome)[0]
        if isinstance(outcome, RlvrError):
            raise outcome
        return outcome

    def _open_output(self) -> None:
        """The run's config.yaml and the metrics log (rank 0 only, in the locked directory)."""
        t = self.t
        self.config_text = dump(self.config)
        (self.output_dir / rundir.CONFIG_FILE).write_text(self.config_text, encoding="utf-8")
        self.log = MetricsLogger(
            self.output_dir,
            max_steps=self.max_steps,
            start_step=self.step,
            logging_steps=t.logging_steps,
            progress=self.progress,
        )
        self._closers.append(self.log)
        if self.rollout_runner.episodes is not None:  # each failed episode, one line
            self.rollout_runner.episodes.errors_path = self.output_dir / ENV_ERRORS_FILE
        self.callbacks.call(
            "on_run_start",
            run=self.run_info,
            output_dir=self.output_dir,
            config=self.config.model_dump(mode="json"),
            start_step=self.step,
        )

    def _log(self, m: dict[str, Any]) -> None:
        """One metrics line: to metrics.jsonl and the console, then to the callbacks."""
        if self.log is None:
            return
        self.log.log(m)
        self.callbacks.call("on_log", step=m["step"], metrics=m)
        if any(k.startswith("eval/") for k in m):
            self.callbacks.call("on_evaluate", step=m["step"], metrics=m)

    def _guides(self, prompts: PromptSet) -> Guides | None:
        """``training.guidance``'s guide completions (None without it)."""
        g = self.t.guidance
        if g is None:
            return None
        return Guides(
            prompts,
            self.tokenizer,
            field=g.field,
            remove=g.remove,
            eos_id=eos_token_ids(self.policy, self.tokenizer)[0],
            max_tokens=self.t.max_completion_length,
        )

    # ------------------------------------------------------------------ one step

    def train_step(self) -> dict[str, Any]:
        """rollout -> no-grad passes -> ``prepare`` -> updates -> metrics (module docstring)."""
        self.step += 1
        start, cpu_start = time.perf_counter(), time.process_time()
        _seed_everything(step_seed(self.t.seed, self.step, 1_000_000))
        self.policy.eval()
        # FSDP: whole weights while generating, unless the backend has its own copy.
        gather = self.host.backends[self.backend_cfg.name].capabilities.samples_from_policy
        with (
            distributed.gathered(self.policy) if gather else contextlib.nullcontext(),
            self.update.clock("generation"),
        ):
            ro = self.rollout_runner.run(self.step, self.prompts_per_step, self.max_steps)
        failed = sum(s.errors + s.timeouts for s in ro.summary.values())
        stopping = self._stop is not None and self._stop.requested
        if self.dist.any(stopping and failed > 0):  # every rank discards, or none
            raise Discarded(
                f"{failed} reward calls failed after the stop was requested (a signal to the "
                "process group reaches the rewards' own processes too)"
            )

        t0 = time.perf_counter()
        batch = build_batch(ro.kept, self.labels, self.pad_id, self.step).to(self.update.device)
        with self.update.clock("no_grad"):
            batch = self.update.fill_no_grad(batch)
        batch, prep_metrics = self.algo.prepare(batch)
        batch = without_environment_tokens(batch)
        lr = self.update.optimizer.param_groups[0]["lr"]
        updates = [self.update.update(batch, first=i == 0) for i in range(self.updates_per_step)]
        self.generator.sync_weights(self.policy)
        t1 = time.perf_counter()

        m = self._reduce(
            ro,
            step_metrics(
                step=self.step,
                algorithm=self.algorithm_cfg.name,
                rollout=ro,
                prepare_metrics=prep_metrics,
                updates=updates,
                learning_rate=lr,
                num_tokens=int(batch.completion_mask.sum().item()),
                step_time=time.perf_counter() - start,
                training_time=t1 - t0,
                cpu_time=time.process_time() - cpu_start,
            )
            | self.update.clock.take()
            | ro.episode_metrics,
        )
        if not m["skipped"]:
            self.bad_steps = 0
        else:
            self.bad_steps += 1
            logger.warning(
                "step %d: non-finite loss or gradient norm; update skipped (%d in a row, "
                "training.max_bad_steps=%d)",
                self.step,
                self.bad_steps,
                self.t.max_bad_steps,
            )
        if self._eval_due():
            m.update(self.evaluate())
        self._log(m)
        self.last_metrics = m
        every = self.t.log_samples_steps
        if self.step % every == 0 or self.step == 1:
            mine = step_sample_records(
                ro, batch.advantages, self.rollout_runner.prompts, self.data_cfg.prompt_field
            )
            records = self.dist.gather(mine)
            if self.log is not None:
                self.log.log_samples(self.step, [r for part in records for r in part])
        memory.return_freed_memory()
        return m

    def _eval_due(self) -> bool:
        every = self.t.eval_steps
        if self.evaluation is None or every is None:
            return False
        if self.step == 0:
            return self.t.eval_on_start
        return self.step % every == 0 or self.step == self.max_steps

    def evaluate(self) -> dict[str, Any]:
        """The current policy on the eval split, as ``eval/...`` metrics (every rank gets
        them; each generated its share of the prompts)."""
        assert self.evaluation is not None
        caps = self.host.backends[self.backend_cfg.name].capabilities
        began = self.budget.now()
        self.policy.eval()
        with distributed.gathered(self.policy):  # FSDP: whole weights while generating
            _, summary = self.evaluation.run(
                self.generator,
                self.scorer,
                backend=self.backend_cfg.name,
                schedules_batches=caps.schedules_batches,
                dist=self.dist,
                reward_errors=self.reward_errors,
                step=self.step,
            )
        self.budget.eval_took(self.budget.now() - began)
        return eval_metrics(summary)

    def _eval_at_stop(self) -> None:
        """A run that max_minutes stops ends with the eval its last step would have had."""
        if self.evaluation is None or self.t.eval_steps is None or self._eval_due():
            return  # no eval configured, or this step has just had its own
        self._log({"step": self.step, **self.evaluate()})

    def _echo(self, message: str) -> None:
        if self.log is not None:
            self.log.write(message)
        else:  # a rank without the run's log (rank > 0, or before setup finished)
            print(f"[rank {self.dist.rank}] {message}", file=sys.stderr, flush=True)

    def _reduce(self, ro: Rollout, m: dict[str, Any]) -> dict[str, Any]:
        """The step's metrics over every rank (the same dict on each)."""
        if not self.dist.enabled:
            return m
        parts = self.dist.gather((m, len(ro.generated)))
        return reduce_metrics([p[0] for p in parts], [p[1] for p in parts])

    # ------------------------------------------------------------------ saving

    def save(self) -> Path:
        # Never a checkpoint to resume from with broken weights, whatever brought them here
        # (the update checks its own steps, PolicyUpdate._check_weights).
        if not math.isfinite(self.update.weights_norm()):
            raise TrainingError(
                f"not saving checkpoint-{self.step}: the trained weights are not finite; "
                f"{self._resumes()}"
            )
        with _saved_as_for_inference(self.policy):
            path = self._save()
        self.callbacks.call("on_save", step=self.step, checkpoint=path)
        return path

    def _resumes(self) -> str:
        """Where ``--resume`` would continue from, for a message."""
        if self._last_saved is None:
            return "no checkpoint was saved before (training.save_steps), so a new run starts over"
        return f"--resume continues from {self.output_dir / f'checkpoint-{self._last_saved}'}"

    def _save(self) -> Path:
        weights = None
        sharded = (self.policy, self.update.optimizer) if self.update.sharded else None
        if sharded:  # a collective: every rank gathers the weights, rank 0 keeps them
            weights = distributed.full_state_dict(self.policy)
        tmp = ckpt.tmp_dir(self.output_dir, self.step)

        def rank_files() -> None:
            ckpt.add_rank_files(tmp, self.dist, sharded)

        if not self.dist.is_main:
            rank_files()
            self._last_saved = self.step
            return self.output_dir / f"checkpoint-{self.step}"
        path = ckpt.save_checkpoint(
            self.output_dir,
            self.step,
            model=self.policy,
            tokenizer=self.tokenizer,
            optimizer=None if sharded else self.update.optimizer,
            scheduler=self.update.scheduler,
            value_model=self.update.value_model,
            model_state=weights,
            save_total_limit=self.t.save_total_limit,
            state={
                "data": self.sampler.state_dict(),
                "bad_steps": self.bad_steps,
                "max_steps": self.max_steps,
                "seed": self.t.seed,
                "metrics": self.last_metrics,
                "world_size": self.dist.world_size,
                "prompts_per_step": self.prompts_per_step,
                "vocab_size": len(self.tokenizer),
                "collapse": self.guard.state_dict(),
            },
            extra_files={"rlvr_config.yaml": self.config_text},
            before_complete=rank_files,
        )
        self._last_saved = self.step
        return path

    # ------------------------------------------------------------------ the loop

    def run(self) -> dict[str, Any]:
        try:
            self.setup()
            if self.step == 0 and self._eval_due():  # the baseline, on a line of its own
                m = {"step": 0, **self.evaluate()}
                self._log(m)
                self.guard.observe_eval(0, _eval_accuracy(m))
            with StopFlag() as stop:
                self._stop = stop
                # a scoring round that hangs past a stop request is abandoned, not waited for
                self.scorer.pool.stop_requested = lambda: stop.requested
                while self.step < self.max_steps:
                    self._step_start = (self.step, self.sampler.position)
                    self.update.stepped = False
                    self.budget.step_began()
                    try:
                        self.train_step()
                    except WeightsError as exc:  # the weights are lost: nothing to save
                        raise TrainingError(f"step {self.step}: {exc}; {self._resumes()}") from None
                    except BaseException as exc:  # Ctrl-C, nothing to train on, out of memory...
                        step = self.step
                        # rewards that failed on the way to a requested stop: stop there
                        discard = stop.requested and isinstance(
                            exc, Discarded | RewardError | ScoringAbandoned
                        )
                        self._save_after_interrupt(announce=not discard)
                        if discard:
                            self._stopped_discarding(step, exc)
                            return self.last_metrics
                        raise
                    self.callbacks.call("on_step_end", step=self.step, metrics=self.last_metrics)
                    if self.bad_steps >= self.t.max_bad_steps:
                        path = self.save()
                        raise TrainingError(
                            f"{self.bad_steps} steps in a row had a non-finite loss or gradient "
                            f"norm (training.max_bad_steps={self.t.max_bad_steps}); stopped at "
                            f"step {self.step} and saved {path} (its weights are from the last "
                            "good update). Lower training.learning_rate, check the rewards for "
                            "huge values, or use training.max_grad_norm"
                        )
                    if self.step % self.t.save_steps == 0:
                        self.save()
                    collapsed = self._watch(self.last_metrics)
                    asked = self.callbacks.control.stop_reason
                    self.budget.step_ended()
                    out_of_time = self.step < self.max_steps and self.budget.out_of_time()
                    # every rank stops at the same step
                    if self.dist.any(stop.requested or out_of_time or collapsed or bool(asked)):
                        if self._last_saved != self.step:
                            self.save()
                        why = ""
                        if collapsed and not stop.requested:
                            why = " (training.collapse.action: stop)"
                        elif asked and not stop.requested:
                            why = f" (a callback asked: {asked})"
                        elif out_of_time and not stop.requested:
                            self._eval_at_stop()
                            why = f" ({self.budget.used()})"
                        self.stopped = why.strip(" ()") or "a stop request"
                        if self.log is not None:
                            self.log.write(
                                f"stopped at step {self.step}{why}; continue with --resume "
                                f"(checkpoint in {self.output_dir})"
                            )
                        return self.last_metrics
                if self._last_saved != self.step:
                    self.save()
            return self.last_metrics
        finally:
            self.close()

    def _watch(self, m: dict[str, Any]) -> bool:
        """After a step: keep the best checkpoint (``training.keep_best``) and ask the collapse
        guard; True when it tripped and ``training.collapse.action`` is stop."""
        accuracy = _eval_accuracy(m)
        if (
            accuracy is not None
            and self.t.keep_best
            and (self.best is None or accuracy > self.best)
        ):
            self.best = accuracy
            if self._last_saved != self.step:
                self.save()
            if self.dist.is_main:
                metric = "pass@1" if "eval/pass@1" in m else "reward_mean"
                ckpt.record_best(self.output_dir, self.step, metric, accuracy)
        found: Collapse | None = self.guard.observe_step(self.step, m)
        if accuracy is not None:
            found = self.guard.observe_eval(self.step, accuracy) or found
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
                self._last_saved,
            )
            return
        if self.update.stepped:
            logger.warning(
                "step %d stopped during its update: no checkpoint saved; --resume continues "
                "from the last one (step %s)",
                self.step,
                self._last_saved,
            )
            return
        self.step, self.sampler.position = self._step_start
        if self.step > 0 and self._last_saved != self.step:
            try:
                path = self.save()
            except Exception as exc:  # e.g. out of memory or disk: the original error matters
                logger.warning("could not save a checkpoint at step %d: %s", self.step, exc)
                return
            if self.log is not None and announce:
                self.log.write(f"stopped; saved {path}; continue with --resume")

    def _stopped_discarding(self, step: int, why: BaseException) -> None:
        """The message of a stop that discarded step ``step`` (``_save_after_interrupt`` has
        saved the step before it, where it could)."""
        if self.log is None:
            return
        saved = self._last_saved == self.step and self.step > 0
        where = f"checkpoint in {self.output_dir}" if saved else "nothing saved"
        self.log.write(
            f"stopped at step {self.step} ({where}); step {step} discarded: {why}; it runs "
            "again on --resume"
        )

    def close(self) -> None:
        while self._closers:
            thing = self._closers.pop()
            try:
                thing.close()
            except Exception as exc:  # closing must not hide the real error
                logger.warning("closing %s failed: %s", type(thing).__name__, exc)


def _eval_accuracy(m: dict[str, Any]) -> float | None:
    """An in-training eval's accuracy on a metrics line: pass@1, else the mean reward."""
    for key in ("eval/pass@1", "eval/reward_mean"):
        value = m.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


@contextlib.contextmanager
def _saved_as_for_inference(model: Any) -> Iterator[None]:
    """Gradient checkpointing turns ``config.use_cache`` off; a saved checkpoint should still
    generate with the KV cache when loaded for inference."""
    config: Any = getattr(model, "config", None)
    before = getattr(config, "use_cache", None)
    if before is False:
        config.use_cache = True
    try:
        yield
    finally:
        if before is False:
            config.use_cache = before


def train(config: RunConfig, host: Host, **options: Any) -> dict:
    """Train the policy ``config`` describes; return the last step's metrics. ``options``
    are :func:`run`'s."""
    return run(config, host, **options).metrics


@dataclass
class RunResult:
    """What :func:`run` returns: the last step's metrics and the run's summary."""

    metrics: dict[str, Any]
    #: :func:`rlvr.outputs.summary.summary_data` (empty on ranks other than 0)
    summary: dict[str, Any]


def run(
    config: RunConfig,
    host: Host,
    *,
    resume: bool = False,
    progress: bool = True,
    rows: list[dict[str, Any]] | None = None,
    eval_rows: list[dict[str, Any]] | None = None,
    callbacks: Sequence[Any] = (),
) -> RunResult:
    """Train the policy ``config`` describes; return its last step's metrics and summary.

    ``config`` is a validated run config (``rlvr.config.schema.load_config`` with the model, data,
    rewards, algorithm and backend sections). ``resume`` continues from the latest complete
    checkpoint in ``training.output_dir``. Ctrl-C (or SIGTERM) finishes the current step, saves
    a checkpoint and returns; a second Ctrl-C aborts without saving. ``rows`` and
    ``eval_rows``: the training and eval rows, when they come from memory rather than
    ``data.path`` and ``data.eval_path``. ``callbacks``: objects called back as the config's
    callbacks are (:mod:`rlvr.training.callbacks`), ``transformers.TrainerCallback`` ones too.
    """
    start = time.perf_counter()
    memory.cap_onednn_cache()
    with distributed.data_parallel() as dist:
        trainer = Trainer(
            config,
            host,
            resume=resume,
            progress=progress,
            rows=rows,
            eval_rows=eval_rows,
            callbacks=callbacks,
        )
        try:
            metrics = trainer.run()
        except BaseException:
            trainer.callbacks.call("on_run_end", step=trainer.step, summary={}, status="failed")
            raise
    summary: dict[str, Any] = {}
    collapse = trainer.guard.tripped
    if dist.is_main:
        took = time.perf_counter() - start
        summary = summary_data(trainer.output_dir, trainer.labels, took, collapse=collapse)
        print(format_summary(summary), flush=True)
        write_summary(trainer.output_dir, summary)
    status = "finished" if trainer.stopped is None else "stopped"
    trainer.callbacks.call("on_run_end", step=trainer.step, summary=summary, status=status)
    if collapse is not None and config.training.collapse.action == "stop":
        raise CollapseStop(
            f"the collapse guard stopped the run at step {trainer.step}: {collapse.message}; "
            f"checkpoint in {trainer.output_dir}. Lower training.learning_rate (or the LoRA "
            "size); training.keep_best with training.eval_steps keeps the best checkpoint"
        )
    return RunResult(metrics, summary)


class CollapseStop(TrainingError):
    """``training.collapse.action: stop`` ended the run (after saving it and its summary)."""


__all__ = ["CollapseStop", "RunResult", "Trainer", "TrainingError", "run", "train"]
