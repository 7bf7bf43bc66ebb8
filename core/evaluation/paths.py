"""What an evaluation reads and writes: the eval data (:func:`eval_data`, its rows
:func:`eval_prompt_rows`), the checkpoint a path names (:func:`resolve_checkpoint`), and where
the samples, summary and reward errors go (:func:`output_paths`); the rules are in
:mod:`rlvr.evaluation.evaluate`.
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path
from typing import Any

from rlvr.api.errors import ConfigWarning
from rlvr.data.prompts import data_source, load_rows, require_fields
from rlvr.evaluation.errors import EvalError
from rlvr.model import lora
from rlvr.outputs.checkpoint import (
    MANIFEST,
    best_checkpoint,
    damage,
    latest_checkpoint,
    list_checkpoints,
)
from rlvr.rewards.failures import ERRORS_FILE

logger = logging.getLogger("rlvr.evaluation.paths")

_DATA_SUFFIXES = (".json", ".jsonl", ".parquet")
SAMPLES_NAME = "samples.jsonl"
SUMMARY_NAME = "summary.json"


def eval_data(data: Any, split: str | None = None) -> tuple[Any, str | None, str]:
    """``(data config to load, split, description)`` of the eval data (see the module doc);
    the split is None when the eval data is a single file.

    ``data`` is the config's :class:`rlvr.config.schema.DataConfig`; the returned copy has ``path``
    set to the eval source and ``max_samples`` cleared.
    """
    explicit = split is not None
    source: str = split if split is not None else (data.eval_split or data.split)
    name: str | None = source
    if Path(source).suffix.lower() in _DATA_SUFFIXES or Path(source).expanduser().is_file():
        path, name, desc = source, None, source  # a file path is the split
    elif data.reasoning_gym is not None:  # generated; the held-out problems are split "test"
        cfg = data.model_copy(update={"split": source, "max_samples": None})
        return cfg, source, data_source(data, source)
    else:
        path = data.eval_path or data.path
        if path is None:  # the training rows came from memory (rlvr.Trainer(dataset=...))
            raise EvalError(
                "no eval data: set data.eval_path (or pass eval_dataset= to rlvr.Trainer, or "
                "--split PATH/TO/FILE.jsonl to rlvr eval)"
            )
        if Path(path).expanduser().is_file():
            if explicit:
                raise EvalError(
                    f"the eval data {path!r} is a single file, which has no split {split!r}; "
                    "pass --split PATH/TO/FILE.jsonl, or set data.eval_path to a directory or "
                    "hub dataset with splits"
                )
            if data.eval_path is None:  # one place: validate's check and the run warn once
                warnings.warn(
                    f"data.path {path!r} is a single file (no splits) and data.eval_path is not "
                    "set: evaluating on the TRAINING data; set data.eval_path or pass --split "
                    "FILE",
                    ConfigWarning,
                    stacklevel=1,
                )
            name, desc = None, path
        else:
            desc = f"{path} [{name}]"
    update = {
        "path": str(path),
        "split": name or data.split,
        "max_samples": None,
        "reasoning_gym": None,
    }
    cfg = data.model_copy(update=update)
    return cfg, name, desc


def resolve_checkpoint(checkpoint: str | Path) -> Path:
    """A model directory (or ``.gguf`` file) from ``checkpoint``: itself, or, when it is a
    run's ``output_dir``, the checkpoint ``training.keep_best`` kept, else the latest complete
    one (which of them is said on stderr); checked against its manifest when it has one, as
    ``--resume`` checks (a flipped byte in the weights would load silently and give wrong
    numbers)."""
    path = _located(checkpoint)
    if path.is_dir() and (path / MANIFEST).is_file():
        problem = damage(path)
        if problem is not None:
            others = [p.name for p in list_checkpoints(path.parent) if p != path]
            hint = f" (beside it: {', '.join(others)})" if others else ""
            raise EvalError(
                f"checkpoint {path} is damaged: {problem}; evaluate another checkpoint"
                f"{hint}, or restore the file from a copy"
            )
    return path


def _located(checkpoint: str | Path) -> Path:
    """The model directory or file ``checkpoint`` names (see :func:`resolve_checkpoint`)."""
    path = Path(checkpoint).expanduser()
    if not path.exists():
        there = [p.name for p in list_checkpoints(path.parent)] if path.parent.is_dir() else []
        hint = f" ({path.parent} holds {', '.join(there)})" if there else ""
        raise EvalError(f"checkpoint {str(checkpoint)!r} does not exist{hint}")
    if (
        path.is_dir()
        and not (path / "config.json").is_file()
        and not lora.is_adapter_checkpoint(path)
    ):
        latest = latest_checkpoint(path)
        if latest is None:
            raise EvalError(
                f"checkpoint {str(checkpoint)!r} is neither a model directory (no config.json), "
                "nor a LoRA adapter (no adapter_config.json), nor a run output_dir with a "
                "complete checkpoint-<step>"
            )
        best = best_checkpoint(path)
        if best is not None:
            chosen = best["path"]
            why = (
                f"the best in-training eval ({best['metric']} {float(best['value']):.3f} at step "
                f"{best['step']}, training.keep_best)"
            )
            if chosen != latest:
                why += f"; the latest is {latest.name} (name it to evaluate that one)"
        else:
            chosen, why = latest, "the run's latest complete checkpoint"
        print(f"rlvr: evaluating {chosen}: {why}", file=sys.stderr, flush=True)
        return chosen
    return path


def output_paths(
    config: Any, output: str | Path | None, model_path: Path | None = None
) -> tuple[Path, Path]:
    """``(samples JSONL, summary JSON)`` for ``output`` (see the module doc). Without
    ``output``, a directory of its own under ``training.output_dir/eval/`` named by what is
    evaluated (:func:`default_eval_dir`), so a before/after pair never overwrites itself."""
    if output is None:
        folder = default_eval_dir(Path(config.training.output_dir) / "eval", model_path)
        return folder / SAMPLES_NAME, folder / SUMMARY_NAME
    out = Path(output).expanduser()
    if out.is_dir() or not out.suffix:
        paths = out / SAMPLES_NAME, out / SUMMARY_NAME
    else:
        paths = out, out.with_name(out.stem + ".summary.json")
    replaced = [str(p) for p in paths if p.exists()]
    if replaced:  # asked for by name: replaced, but never silently
        logger.warning("--output: replacing %s", ", ".join(replaced))
    return paths


def default_eval_dir(parent: Path, model_path: Path | None) -> Path:
    """``parent/base`` for the config's model, ``parent/<name>`` for a checkpoint
    (``checkpoint-40``, a ``.gguf`` file's stem); when that already holds an evaluation,
    ``<name>-2``, ``<name>-3``, ...: an earlier evaluation is never replaced."""
    if model_path is None:
        name = "base"
    else:
        name = model_path.stem if model_path.suffix == ".gguf" else model_path.name
    folder, n = parent / name, 1
    while folder.exists() and any(folder.iterdir()):
        n += 1
        folder = parent / f"{name}-{n}"
    return folder


def eval_prompt_rows(config: Any, host: Any, split: str | None, limit: int | None):
    """``(rows, data config, split, description)`` of the eval data: :func:`eval_data`, its
    first ``limit`` rows, checked for the fields the rewards need."""
    if limit is not None and limit < 1:
        raise EvalError(f"limit must be >= 1 (got {limit})")
    data_cfg, split_name, data_desc = eval_data(config.data, split)
    rows = load_rows(data_cfg, split=split_name)
    if limit is not None:
        rows = rows[:limit]
    require_fields(
        rows,
        config.rewards,
        host,
        prompt_field=data_cfg.prompt_field,
        source=f"eval data {data_desc!r}",
    )
    return rows, data_cfg, split_name, data_desc


def reward_errors_path(samples: Path, summary: Path) -> Path:
    """Where the rewards' failures go: beside the samples, named like the summary."""
    if summary.name == SUMMARY_NAME:
        return samples.parent / ERRORS_FILE
    return samples.with_name(samples.stem + "." + ERRORS_FILE)


__all__ = [
    "SAMPLES_NAME",
    "SUMMARY_NAME",
    "default_eval_dir",
    "reward_errors_path",
    "eval_data",
    "eval_prompt_rows",
    "output_paths",
    "resolve_checkpoint",
]
