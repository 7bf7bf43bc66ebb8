"""Continuing a run: which checkpoint it continues from, and what it takes back from it.

The weights come back with the models (:mod:`rlvr.training.models`); :func:`restore` brings the
rest: optimizer (whole, or FSDP shards resharded to this run's ranks), scheduler, value model,
this rank's RNG states, and the trainer state it returns (step, data position, ...). What a
resume changes on purpose (another world size, another ``max_steps``) is accepted with a
warning that says what differs from the original run; :func:`config_changes` lists every config
key that differs from the checkpoint's, and a change to the LoRA adapters (the saved weights'
shapes) stops the resume before anything loads.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml

from rlvr.api.errors import TrainingError
from rlvr.outputs import checkpoint as ckpt
from rlvr.outputs.metrics import METRICS_FILE
from rlvr.parallel import distributed

logger = logging.getLogger("rlvr.outputs.resume")


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


#: Keys whose change gives the saved weights another shape: no resume across them. A changed
#: ``name_or_path`` is only warned about: the model may have moved, and the checkpoint holds
#: the weights (or, under LoRA, the adapters) that the run goes on from.
_WEIGHT_KEYS = ("model.lora",)


def config_changes(checkpoint: Path, config_text: str) -> list[str]:
    """``key: old -> new`` for every config key that differs between the config saved in
    ``checkpoint`` (``rlvr_config.yaml``) and ``config_text`` (both resolved YAML). Raises
    :class:`TrainingError` when one of them changes what the saved weights are."""
    saved = checkpoint / "rlvr_config.yaml"
    if not saved.is_file():
        return []
    before = _flat(yaml.safe_load(saved.read_text(encoding="utf-8")))
    after = _flat(yaml.safe_load(config_text))
    missing = "(unset)"
    changes = {
        key: f"{key}: {before.get(key, missing)!r} -> {after.get(key, missing)!r}"
        for key in sorted(before.keys() | after.keys())
        if before.get(key, missing) != after.get(key, missing)
    }
    fatal = [text for key, text in changes.items() if key.startswith(_WEIGHT_KEYS)]
    if fatal:
        raise TrainingError(
            f"cannot resume from {checkpoint}: its adapters were saved for another LoRA setup "
            f"({'; '.join(fatal)}). Resume with the config the run was started with (saved as "
            f"{saved}), or set training.output_dir to a new directory for a new run"
        )
    return list(changes.values())


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts and lists as ``{"a.b[0].c": value}``."""
    if isinstance(node, dict):
        items = [(f"{prefix}.{k}" if prefix else str(k), v) for k, v in node.items()]
    elif isinstance(node, list):
        items = [(f"{prefix}[{i}]", v) for i, v in enumerate(node)]
    else:
        return {prefix: node}
    out: dict[str, Any] = {}
    for key, value in items:
        out.update(_flat(value, key) if isinstance(value, dict | list) and value else {key: value})
    return out


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
    ckpt.check_resume(path, dist, sharded=sharded)
    shards = path / distributed.OPTIMIZER_DIR
    rng_file = path / ckpt.rank_rng_file(dist.rank)
    try:
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
    except (ValueError, RuntimeError, KeyError) as exc:  # e.g. another algorithm's value model
        raise TrainingError(
            f"cannot resume from {path}: its optimizer or value model does not fit this run's "
            f"({type(exc).__name__}: {exc}). The config differs from the checkpoint's in a way "
            "that changes what trains (see the warning above); resume with the config the run "
            f"was started with ({path / 'rlvr_config.yaml'}), or set training.output_dir to a "
            "new directory for a new run"
        ) from None
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
