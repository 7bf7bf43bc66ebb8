"""Building a training run's parts, before its first step: the output directory claimed, the
checked data, the rewards' scorer, the run's description, the evaluation, the policy update,
the checkpointer, the step's runner (rollout included) and the metrics log.

:meth:`rlvr.training.trainer.Trainer.setup` calls these in order, cheap checks first and the
models last, so a mistake in the config or the data stops a run before anything loads.
"""

from __future__ import annotations

import contextlib
import copy
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch

from rlvr.api.errors import ConfigWarning, RlvrError, TrainingError
from rlvr.api.host import PluginHost, build_generator
from rlvr.api.registration import Requirements
from rlvr.api.runtime import RunInfo
from rlvr.config.schema import RunConfig, dump, multi_turn
from rlvr.data.prompts import PromptSampler, PromptSet, data_source, load_rows, require_fields
from rlvr.evaluation.loop import Evaluation
from rlvr.evaluation.paths import eval_prompt_rows
from rlvr.model.loading import busy_cpu_warning, eos_token_ids, resolve_device_dtype
from rlvr.outputs import checkpoint as ckpt
from rlvr.outputs import rundir
from rlvr.outputs.metrics import ENV_ERRORS_FILE
from rlvr.outputs.metrics_logger import MetricsLogger
from rlvr.outputs.resume import check_config, resume_point
from rlvr.parallel.distributed import Dist
from rlvr.rewards.failures import RewardErrorLog
from rlvr.rewards.scoring import Scorer, score_entries
from rlvr.rollout.episodes import EpisodeRunner, episode_runner
from rlvr.rollout.guidance import Guides
from rlvr.rollout.pipeline import RolloutPipeline
from rlvr.rollout.runner import RolloutRunner
from rlvr.training.callbacks import ReportError, unavailable
from rlvr.training.checkpointer import Checkpointer
from rlvr.training.models import RunModels
from rlvr.training.stateful import Stateful
from rlvr.training.step import StepRunner
from rlvr.training.update import PolicyUpdate

_T = TypeVar("_T")

#: A dataset's rows, as the data loaders give them.
Rows = list[dict[str, Any]]


def section(value: _T | None, name: str) -> _T:
    """A config section training needs (``load_config(require=...)`` reports a missing one)."""
    if value is None:
        raise TrainingError(f"the config has no {name!r} section; training needs one")
    return value


@contextlib.contextmanager
def shown_by_validation() -> Iterator[None]:
    """Without the config warnings that the validation every run starts with
    (:func:`rlvr.runs.train`, :class:`rlvr.Trainer`) has shown: the data's and the eval's."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        yield


def claim_output_dir(
    config: RunConfig,
    host: PluginHost,
    output_dir: Path,
    resume: bool,
    dist: Dist,
    closers: list[Any],
) -> Path | None:
    """The checks before anything loads, and the output directory taken: the checkpoint a
    resume continues from (None: a new run). A logger's missing package, a changed model, a
    directory another run holds stop the run here."""
    missing = unavailable(config, host)
    if missing:  # a logger's missing package fails now, not after loading
        raise ReportError("; ".join(f"{path} {why}" for path, why in missing))
    resume_from = _take_output_dir(output_dir, resume, dist, closers)
    if resume_from is not None:  # before anything loads: a changed model stops here
        check_config(resume_from, dump(config), warn=dist.is_main)
    if dist.is_main:
        ckpt.clean_leftovers(output_dir)
    dist.barrier()  # no rank sees files rank 0 writes before every rank checked
    return resume_from


def _take_output_dir(output_dir: Path, resume: bool, dist: Dist, closers: list[Any]) -> Path | None:
    """Rank 0 locks the output directory for the life of the run (the lock joins ``closers``)
    and decides where the run starts (:func:`rlvr.outputs.resume.resume_point`); every rank
    gets its answer, or its error."""
    outcome: Path | RlvrError | None = None
    if dist.is_main:
        try:
            held = rundir.hold(output_dir)
            closers.append(held)  # the first in: released last
            try:
                outcome = resume_point(output_dir, resume, held)
            except RlvrError:  # refused: the directory is left as it was found
                closers.remove(held)
                held.abandon()
                raise
        except RlvrError as exc:
            outcome = exc
    if dist.enabled:
        outcome = dist.gather(outcome)[0]
    if isinstance(outcome, RlvrError):
        raise outcome
    return outcome


def checked_rows(
    config: RunConfig, host: PluginHost, rows: Rows | None, eval_rows: Rows | None
) -> tuple[Rows, tuple[Any, ...] | None]:
    """The training rows (``rows``, else ``data.path``'s) and the eval's (``eval_rows``, else
    ``data.eval_path``'s; None when ``training.eval_steps`` is unset), each checked for the
    fields the rewards need before any model loads."""
    t, data = config.training, config.data
    assert data is not None  # Trainer requires the section
    given = rows is not None
    rows = rows if rows is not None else load_rows(data, host)
    require_fields(
        rows,
        config.rewards,
        host,
        prompt_field=data.prompt_field,
        guide_field=t.guidance.field if t.guidance is not None else None,
        source="the dataset" if given else data_source(data),
    )
    if t.eval_steps is None:
        return rows, None
    if eval_rows is not None:
        limited = eval_rows[: t.eval_limit]
        require_fields(
            limited,
            config.rewards,
            host,
            prompt_field=data.prompt_field,
            source="the eval dataset",
        )
        return rows, (limited, data, None, "eval_dataset")
    with shown_by_validation():
        return rows, eval_prompt_rows(config, host, None, t.eval_limit)


def scoring(
    config: RunConfig, host: PluginHost, output_dir: Path | None, echo: Callable[[str], None]
) -> tuple[Scorer, RewardErrorLog]:
    """The rewards' scorer (its workers start now, building their rewards while the models
    load) and the log of their failures (its file in ``output_dir``: rank 0's only)."""
    t = config.training
    entries = score_entries(config, host)
    reward_errors = RewardErrorLog(
        entries, output_dir, max_error_frac=t.max_reward_error_frac, echo=echo
    )
    return Scorer(entries, workers=t.reward_workers), reward_errors


def run_info(
    config: RunConfig, host: PluginHost, max_steps: int, dist: Dist
) -> tuple[RunInfo, torch.device, torch.dtype]:
    """What the plugins are told about the run (checked against its protocol before any model
    loads), and the device and dtype it computes in; rank 0 says which ``auto`` chose."""
    model = config.model
    assert model is not None  # Trainer requires the section
    device, dtype = resolve_device_dtype(model.dtype)
    run = RunInfo.from_config(
        config,
        max_steps=max_steps,
        device=device,
        dtype=dtype,
        multi_turn=multi_turn(config, host),
    )
    if dist.is_main:  # auto depends on the machine: say what it chose
        print(
            f"rlvr: {run.device}, computing in {run.dtype} (model.dtype: {model.dtype})",
            file=sys.stderr,
            flush=True,
        )
        if device.type == "cpu" and (busy := busy_cpu_warning()):
            print(f"rlvr: warning: {busy}", file=sys.stderr, flush=True)
    return run, device, dtype


def prompt_set(rows: Rows, data: Any, tokenizer: Any, max_prompt_length: int | None) -> PromptSet:
    """``rows`` as tokenized prompts (their warnings were shown by the validation)."""
    with shown_by_validation():
        return PromptSet(rows, data, tokenizer, max_prompt_length)


def evaluation(
    config: RunConfig, host: PluginHost, eval_rows: tuple[Any, ...] | None, tokenizer: Any
) -> Evaluation | None:
    """The in-training evaluation of :func:`checked_rows`'s eval rows (None without them)."""
    if eval_rows is None:
        return None
    t = config.training
    rows, eval_cfg, _, _ = eval_rows
    return Evaluation(
        config,
        prompt_set(rows, eval_cfg, tokenizer, t.max_prompt_length),
        k=t.eval_num_generations,
        greedy=t.eval_sampling == "greedy",
        host=host,
    )


def policy_update(
    config: RunConfig,
    models: RunModels,
    algorithm: Any,
    req: Requirements,
    dist: Dist,
    max_steps: int,
    device: torch.device,
    dtype: torch.dtype,
) -> PolicyUpdate:
    """The policy's optimizer updates, over the run's ``max_steps x num_iterations`` of them."""
    return PolicyUpdate(
        policy=models.policy,
        reference=models.reference,
        reference_is_base=models.reference_is_base,
        value_model=models.value_model,
        algorithm=algorithm,
        old_logprobs=req.old_logprobs,
        training=config.training,
        device=device,
        dtype=dtype,
        total_updates=max_steps * algorithm.num_iterations,
        updates_per_step=algorithm.num_iterations,
        dist=dist,
    )


def generator(
    config: RunConfig, host: PluginHost, run: RunInfo, policy: Any, tokenizer: Any
) -> Any:
    """The backend's generator. A backend that samples from the trained model itself (``hf``)
    gets a copy of it under asynchronous rollouts, which train the policy while the next steps
    sample: the copy takes each update's weights in ``sync_weights``."""
    backend = section(config.backend, "backend")
    record = host.backends[backend.name]
    model = policy
    if config.training.max_staleness and record.capabilities.samples_from_policy:
        model = copy.deepcopy(policy)
        model.requires_grad_(False)
    return build_generator(record, backend.params, run, model, tokenizer)


def step_runner(
    config: RunConfig,
    host: PluginHost,
    run: RunInfo,
    *,
    generator: Any,
    scorer: Scorer,
    reward_errors: RewardErrorLog,
    prompts: PromptSet,
    sampler: PromptSampler,
    models: RunModels,
    update: PolicyUpdate,
    algorithm: Any,
    dist: Dist,
    prompts_per_step: int,
    start_step: int,
) -> StepRunner:
    """One step's computation, its rollout included: generate, score and select (with
    ``training.guidance``'s guides and a multi-turn environment's episode runner, where the
    config has them)."""
    backend, algorithm_cfg = config.backend, config.algorithm
    assert backend is not None and algorithm_cfg is not None  # Trainer requires the sections
    policy, tokenizer = models.policy, models.tokenizer
    labels = [e.label for e in reward_errors.entries]
    episodes = _episodes(config, host, run, generator, prompts, policy, tokenizer)
    rollout = RolloutRunner(
        generator=generator,
        scorer=scorer,
        reward_errors=reward_errors,
        prompts=prompts,
        sampler=sampler,
        labels=labels,
        pad_id=models.pad_id,
        training=config.training,
        backend=backend.name,
        select=algorithm.select,
        max_rounds=algorithm.max_generation_rounds,
        dist=dist,
        guides=_guides(config.training, prompts, policy, tokenizer),
        episodes=episodes,
        sampler_logprobs=config.training.max_staleness > 0,
    )
    stepper = StepRunner(
        update=update,
        rollout_runner=rollout,
        algorithm=algorithm,
        algorithm_name=algorithm_cfg.name,
        generator=generator,
        labels=labels,
        pad_id=models.pad_id,
        seed=config.training.seed,
        prompts_per_step=prompts_per_step,
        max_steps=run.max_steps,
        dist=dist,
        # FSDP: whole weights while generating, unless the backend has its own copy.
        gather=host.backends[backend.name].capabilities.samples_from_policy,
    )
    if config.training.max_staleness:
        stepper.pipeline = _pipeline(config, stepper, generator, sampler, dist, start_step)
    return stepper


def _pipeline(
    config: RunConfig,
    stepper: StepRunner,
    generator: Any,
    sampler: PromptSampler,
    dist: Dist,
    start_step: int,
) -> RolloutPipeline:
    """``training.max_staleness`` >= 1: the step's rollouts from a producer thread, which takes
    its prompts from its own copy of the run's prompt order (the trainer's copy is the one its
    checkpoints keep). With several ranks the rollouts' collectives get a process group of
    their own, and every rank's rollouts from the old weights are done before any rank's
    generator takes new ones (servers several ranks share take them from rank 0 only)."""
    ahead = copy.deepcopy(sampler)
    stepper.rollout_runner.sampler = ahead
    stepper.rollout_runner.dist = dist.own_group()
    return RolloutPipeline(
        stepper.rollout,
        generator,
        max_staleness=config.training.max_staleness,
        first_step=start_step + 1,
        last_step=stepper.max_steps,
        producer_sampler=ahead,
        consumed=sampler,
        all_ranks_done=dist.barrier,
    )


def checkpointer(
    config: RunConfig,
    dist: Dist,
    update: PolicyUpdate,
    tokenizer: Any,
    *,
    progress: Stateful,
    pieces: Mapping[str, Mapping[str, Stateful]],
    facts: Mapping[str, Any],
) -> Checkpointer:
    """The run's checkpointer, of ``pieces`` (``state`` and ``tensors``, :meth:`Trainer.stateful
    <rlvr.training.trainer.Trainer.stateful>`); ``facts`` (the planned steps, the global batch)
    join what every checkpoint records about the run for a resume's warnings."""
    t = config.training
    return Checkpointer(
        Path(t.output_dir),
        dist=dist,
        model=update.policy,
        tokenizer=tokenizer,
        progress=progress,
        state=pieces["state"],
        tensors=pieces["tensors"],
        facts={
            **facts,
            "seed": t.seed,
            "world_size": dist.world_size,
            "vocab_size": len(tokenizer),
        },
        save_steps=t.save_steps,
        save_total_limit=t.save_total_limit,
        sharded=update.sharded,
        extra_files={"rlvr_config.yaml": dump(config)},
    )


def metrics_log(
    config: RunConfig,
    max_steps: int,
    start_step: int,
    progress: bool,
    episodes: EpisodeRunner | None,
) -> MetricsLogger:
    """The run's ``config.yaml`` and its metrics log, which failed episodes get a file beside
    (rank 0 only, in the locked directory)."""
    t = config.training
    output_dir = Path(t.output_dir)
    (output_dir / rundir.CONFIG_FILE).write_text(dump(config), encoding="utf-8")
    if episodes is not None:  # each failed episode, one line
        episodes.errors_path = output_dir / ENV_ERRORS_FILE
    return MetricsLogger(
        output_dir,
        max_steps=max_steps,
        start_step=start_step,
        logging_steps=t.logging_steps,
        progress=progress,
    )


def _guides(training: Any, prompts: PromptSet, policy: Any, tokenizer: Any) -> Guides | None:
    """``training.guidance``'s guide completions (None without it)."""
    g = training.guidance
    if g is None:
        return None
    return Guides(
        prompts,
        tokenizer,
        field=g.field,
        remove=g.remove,
        eos_id=eos_token_ids(policy, tokenizer)[0],
        max_tokens=training.max_completion_length,
    )


def _episodes(
    config: RunConfig,
    host: PluginHost,
    run: RunInfo,
    generator: Any,
    prompts: PromptSet,
    policy: Any,
    tokenizer: Any,
) -> EpisodeRunner | None:
    """The runner of multi-turn episodes (the environment built and checked, its limits);
    None for a single-turn run."""
    if not multi_turn(config, host):
        return None
    return episode_runner(config, host, run, generator, prompts, eos_token_ids(policy, tokenizer))


__all__ = [
    "checked_rows",
    "claim_output_dir",
    "checkpointer",
    "evaluation",
    "metrics_log",
    "policy_update",
    "prompt_set",
    "run_info",
    "scoring",
    "section",
    "shown_by_validation",
    "step_runner",
]
