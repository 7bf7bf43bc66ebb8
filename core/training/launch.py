"""Launching a training run: :func:`run` (and :func:`train`, its metrics only) builds the
run's :class:`~rlvr.training.trainer.Trainer` in the data-parallel context, runs it, then
writes and prints the run's summary and tells the callbacks how it ended."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rlvr.api.errors import TrainingError
from rlvr.api.host import PluginHost
from rlvr.config.schema import RunConfig
from rlvr.outputs.summary import format_summary, summary_data, write_summary
from rlvr.parallel import distributed
from rlvr.training import memory
from rlvr.training.trainer import Trainer


def train(config: RunConfig, host: PluginHost, **options: Any) -> dict:
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
    host: PluginHost,
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
        summary["stopped"] = trainer.stopped
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


__all__ = ["CollapseStop", "RunResult", "TrainingError", "run", "train"]
