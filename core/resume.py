"""Continuing a run: which checkpoint it continues from, and what it takes back from it.

The weights come back with the models (:mod:`rlvr.run_models`); :func:`restore` brings the
rest: optimizer (whole, or FSDP shards resharded to this run's ranks), scheduler, value model,
this rank's RNG states, and the trainer state it returns (step, data position, ...). What a
resume changes on purpose (another world size, another ``max_steps``) is accepted with a
warning that says what differs from the original run.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rlvr import checkpoint as ckpt
from rlvr import distributed
from rlvr.errors import TrainingError
from rlvr.metrics import METRICS_FILE

logger = logging.getLogger("rlvr.resume")


def resume_point(output_dir: Path, resume: bool) -> Path | None:
    """The checkpoint ``--resume`` continues from; None for a new run. A new run never
    writes into a directory that holds one already."""
    found = ckpt.latest_checkpoint(output_dir)
    if resume:
        if found is None:
            raise TrainingError(
                f"--resume: no complete checkpoint in {output_dir} (looked for "
                "checkpoint-<step> directories with a COMPLETE marker)"
            )
        return found
    if found is not None or (output_dir / METRICS_FILE).is_file():
        raise TrainingError(
            f"{output_dir} already holds a run; pass --resume to continue it, or set "
            "training.output_dir to a new directory (rlvr never overwrites a run)"
        )
    return None


def restore(
    path: Path,
    *,
    dist: distributed.Dist,
    policy: Any,
    optimizer: Any,
    scheduler: Any,
    value_model: Any,
    sharded: bool,
    prompts_per_step: int,
    max_steps: int,
) -> dict[str, Any]:
    """Load ``path``'s optimizer, scheduler, value model and RNG states into the given
    objects; return its trainer state."""
    distributed.check_resume(path, dist, sharded=sharded)
    shards = path / distributed.OPTIMIZER_DIR
    rng_file = path / ckpt.rank_rng_file(dist.rank)
    state = ckpt.load_checkpoint(
        path,
        optimizer=None if shards.is_dir() else optimizer,
        scheduler=scheduler,
        value_model=value_model,
        # A rank the saving run did not have: every step reseeds from (seed, step, rank).
        restore_rng=rng_file.is_file(),
        rank=dist.rank,
    )
    if shards.is_dir():  # resharded to this run's ranks
        distributed.load_sharded_optimizer(policy, optimizer, shards)
    _warn_changes(state, dist.world_size, prompts_per_step, max_steps)
    logger.info("resumed from %s (step %d)", path, int(state["step"]))
    return state


def _warn_changes(
    state: dict[str, Any], world_size: int, prompts_per_step: int, max_steps: int
) -> None:
    saved = int(state.get("world_size", 1))
    if saved != world_size:
        logger.warning(
            "resuming a %d-rank checkpoint on %d rank(s): the data continues where it "
            "stopped, but each rank's slice of a step, and so its sampling seeds, differ from "
            "the original run",
            saved,
            world_size,
        )
        before = state.get("prompts_per_step")
        if before is not None and int(before) != prompts_per_step:
            logger.warning(
                "the global batch changes from %s to %d prompts per step (per_device_train_"
                "batch_size x gradient_accumulation_steps x ranks); scale "
                "per_device_train_batch_size to keep it",
                before,
                prompts_per_step,
            )
    if state.get("max_steps") not in (None, max_steps):
        logger.warning(
            "resuming a run planned for %s steps with max_steps=%d",
            state.get("max_steps"),
            max_steps,
        )
