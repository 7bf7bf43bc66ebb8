"""Continuing a run: which checkpoint it continues from, and what it takes back from it.

The weights come back with the models (:mod:`rlvr.training.models`), the rest with the run's
checkpointer (:class:`rlvr.training.checkpointer.Checkpointer`). What a
resume changes on purpose (another world size, another ``max_steps``) is accepted with a
warning that says what differs from the original run; :func:`config_changes` lists every config
key that differs from the checkpoint's, and a change to the LoRA adapters (the saved weights'
shapes) stops the resume before anything loads.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import yaml

from rlvr.api.errors import ConfigWarning, TrainingError
from rlvr.outputs import checkpoint as ckpt
from rlvr.outputs import rundir

logger = logging.getLogger("rlvr.outputs.resume")


def resume_point(output_dir: Path, resume: bool, hold: rundir.Hold) -> Path | None:
    """The checkpoint ``--resume`` continues from; None for a new run. Called under the
    directory's lock (``hold``). A new run never writes into a directory that holds a
    checkpoint, nor over a file rlvr did not create; a run that stopped before its first
    checkpoint is started over, with or without ``--resume`` (there is nothing to resume)."""
    found = ckpt.latest_checkpoint(output_dir)
    if found is not None and not hold.created:  # a run of an rlvr from before the record
        hold.adopt()
    why = rundir.refusal(output_dir, resume=resume, created=hold.created)
    if why is not None:
        raise TrainingError(why)
    if found is not None:
        path: Path | None = newest_intact(output_dir)
    else:
        left = hold.left_behind()
        if left:
            logger.warning(
                "%s: the run there stopped before its first checkpoint; starting it over "
                "(removing what it wrote: %s)",
                output_dir,
                ", ".join(left),
            )
            hold.remove(left)
            ckpt.clean_leftovers(output_dir)
        path = None
    hold.claim()
    return path


def newest_intact(output_dir: Path) -> Path:
    """The newest complete checkpoint whose files are as they were written; each newer damaged
    one is named with what is wrong (it stays where it is, and is replaced when the run saves
    that step again). Raises :class:`TrainingError` when none is intact."""
    bad: list[str] = []
    for path in reversed(ckpt.list_checkpoints(output_dir)):
        problem = ckpt.damage(path)
        if problem is None:
            break
        bad.append(f"{path.name} ({problem})")
        logger.warning("%s is damaged: %s", path, problem)
    else:
        raise TrainingError(
            f"--resume: no intact checkpoint in {output_dir}: {'; '.join(bad)}. Restore the "
            "files from a copy, or start a new run in another training.output_dir (set "
            "model.name_or_path to a checkpoint directory to start from its weights)"
        )
    if bad:
        logger.warning(
            "resuming from %s, the newest intact checkpoint, instead of %s",
            path.name,
            ", ".join(b.split(" ")[0] for b in bad),
        )
    if not (path / ckpt.MANIFEST).is_file():
        logger.warning(
            "%s has no %s (written by an older rlvr): its files cannot be verified",
            path,
            ckpt.MANIFEST,
        )
    return path


#: Keys whose change gives the saved weights another shape: no resume across them. A changed
#: ``name_or_path`` is only warned about: the model may have moved, and the checkpoint holds
#: the weights (or, under LoRA, the adapters) that the run goes on from.
_WEIGHT_KEYS = ("model.lora",)


def check_config(checkpoint: Path, config_text: str, *, warn: bool = True) -> None:
    """:func:`config_changes`, and with ``warn`` the warning about them: from this one place,
    so ``rlvr validate --resume`` and the run that follows warn once."""
    changes = config_changes(checkpoint, config_text)
    if changes and warn:
        warnings.warn(
            "resuming with a config that differs from the checkpoint's (which keeps the "
            f"original as rlvr_config.yaml): {'; '.join(changes)}",
            ConfigWarning,
            stacklevel=1,
        )


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


def check_vocabulary(path: Path, state: dict[str, Any], policy: Any, tokenizer: Any) -> None:
    """The tokenizer loaded from ``path`` has the tokens it was saved with and no more than the
    model has embedding rows (a model may have more: vocabularies are padded). A damaged
    tokenizer loads without complaint as a few special tokens, and every completion would
    decode to nothing."""
    tokens = len(tokenizer)
    saved = state.get("vocab_size")
    embeddings = policy.get_input_embeddings()
    rows = getattr(embeddings, "num_embeddings", None)
    if (saved is not None and tokens != int(saved)) or (rows is not None and tokens > rows):
        was = f"it was saved with {saved}, " if saved is not None else ""
        raise TrainingError(
            f"cannot resume from {path}: its tokenizer has {tokens} tokens ({was}the model has "
            f"{rows} embedding rows); the tokenizer files there (tokenizer.json, "
            "tokenizer_config.json) are damaged or missing"
        )


def warn_changes(
    state: dict[str, Any], world_size: int, prompts_per_step: int, max_steps: int
) -> None:
    """Warn about what a resume changes on purpose: the world size, the global batch, the
    planned steps."""
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
