"""Pre-flight: everything a run needs that the schema cannot see, checked before any weights
load, every problem reported at once with its path in the config.

``rlvr validate`` and ``rlvr train`` run the same checks (:func:`rlvr.runs.validate`): first
:func:`refuse_output_dir`, light (no torch), so a run directory that refuses the run is
reported at once; then :func:`preflight`: the data files exist and their columns cover every
field the prompt and the rewards need; the model's config and tokenizer are readable (its
weights are not loaded) and the prompts go through its chat template as the data section
says (with the same warning as the run); with ``training.eval_steps``, the eval data loads
and a reward can judge it; the packages that ``report_to`` names are installed; and, when
all that holds, the algorithm builds as the run builds it. Paths in
messages are absolute, so it is clear where rlvr looked.

Light to import: torch, transformers and datasets load when :func:`preflight` runs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rlvr.api.errors import RlvrError
from rlvr.api.host import Host, build_algorithm
from rlvr.api.runtime import RunInfo
from rlvr.config.problems import sort_problems, with_origins
from rlvr.config.schema import SECTIONS, ConfigError, RunConfig, dump, multi_turn, requirements
from rlvr.evaluation.correctness import correctness
from rlvr.outputs.rundir import OutputDirError, latest_checkpoint, not_a_directory, refusal
from rlvr.training.callbacks import unavailable
from rlvr.training.stopping import planned_steps


def refuse_output_dir(config: RunConfig, *, resume: bool) -> None:
    """Raise :class:`~rlvr.outputs.rundir.OutputDirError` when ``training.output_dir`` would
    refuse ``rlvr train`` (``resume``: with ``--resume``), with the run's own message."""
    why = refusal(config.training.output_dir, resume=resume)
    if why is not None:
        raise OutputDirError(why)


def check_resume(config: RunConfig) -> None:
    """What ``rlvr train --resume`` checks of the checkpoint it continues from before anything
    loads, with its warnings: one is intact (its files match its manifest), and the config
    changes nothing that gives the saved weights another shape. Raises
    :class:`~rlvr.TrainingError` as the run does."""
    from rlvr.outputs.resume import check_config, newest_intact  # torch

    root = Path(config.training.output_dir).absolute()
    if latest_checkpoint(root) is not None:  # else a run that died early: it starts over
        check_config(newest_intact(root), dump(config))


def preflight(
    config: RunConfig,
    host: Host,
    rows: list[dict[str, Any]] | None = None,
    *,
    eval_rows: bool = False,
) -> list[tuple[str, str]]:
    """``(config path, problem)`` for everything in ``config`` that would stop a run;
    ``rows``: the training rows when they come from memory, not ``data.path``; ``eval_rows``:
    the eval rows do too (their data is not looked for)."""
    problems = unavailable(config, host) + _output_dir(config)
    if config.data is not None:
        found, rows = _data(config, host, rows)
        problems += found
    tokenizer = None
    if config.model is not None:
        found, tokenizer = _model(config)
        problems += found
    if config.data is not None and tokenizer is not None:
        problems += _chat_template(config, rows, tokenizer)
    if config.training.eval_steps is not None:
        problems += _evaluation(config, host, eval_rows)
    if not problems and rows is not None:
        _algorithm(config, host, len(rows))
    return problems


def _output_dir(config: RunConfig) -> list[tuple[str, str]]:
    """``training.output_dir`` is a directory, or can become one (no file in the way)."""
    root = Path(config.training.output_dir).absolute()
    if any(p.exists() and not p.is_dir() for p in (root, *root.parents)):
        return [("training.output_dir", not_a_directory(root).removeprefix("training.output_dir "))]
    return []


def _data(
    config: RunConfig, host: Host, rows: list[dict[str, Any]] | None
) -> tuple[list[tuple[str, str]], list[dict[str, Any]] | None]:
    """The data's problems, and its rows when they load."""
    from rlvr.data.prompts import field_problems, load_rows  # datasets

    data = config.data
    assert data is not None
    problems = []
    if data.eval_path is not None and _looks_missing(data.eval_path):
        problems.append(("data.eval_path", f"{data.eval_path!r} does not exist"))
    if rows is None:
        try:
            rows = _quiet(load_rows, data)
        except RlvrError as exc:
            where = "data.path" if data.reasoning_gym is None else "data.reasoning_gym"
            return [*problems, (where, str(exc).removeprefix(f"{where} "))], None
    if data.reasoning_gym is not None:  # its held-out split is made now too: cheap, and may fail
        try:
            _quiet(lambda: load_rows(data, split=data.eval_split or "test"))
        except RlvrError as exc:
            problems.append(("data.reasoning_gym", str(exc)))
    guidance = config.training.guidance
    problems += field_problems(
        rows,
        config.rewards,
        host,
        prompt_field=data.prompt_field,
        guide_field=guidance.field if guidance is not None else None,
    )
    return problems, rows


def _chat_template(
    config: RunConfig, rows: list[dict[str, Any]] | None, tokenizer: Any
) -> list[tuple[str, str]]:
    """The prompts go through the chat template as ``data.chat_template`` says (a problem
    when it asks for one the tokenizer lacks), and the run's warning about plain strings."""
    from rlvr.data.prompts import use_chat_template, warn_plain_strings  # datasets

    data = config.data
    assert data is not None
    try:
        chat = use_chat_template(data, tokenizer)
    except RlvrError as exc:
        return [("data.chat_template", str(exc).removeprefix("data.chat_template "))]
    warn_plain_strings(rows or [], data, chat)
    return []


def _evaluation(config: RunConfig, host: Host, in_memory: bool) -> list[tuple[str, str]]:
    """With ``training.eval_steps``: a reward judges the eval samples, and the eval data loads
    with the fields the rewards need (as the run checks them before its first step)."""
    from rlvr.evaluation.paths import eval_prompt_rows  # torch, datasets

    problems = []
    try:
        correctness(config, host=host)
    except RlvrError as exc:
        problems.append(("training.eval_steps", str(exc)))
    if not in_memory and config.data is not None:
        try:
            _quiet(eval_prompt_rows, config, host, None, config.training.eval_limit)
        except RlvrError as exc:
            where = "data.eval_path" if config.data.eval_path is not None else "data"
            problems.append((where, str(exc)))
    return problems


def _algorithm(config: RunConfig, host: Host, rows: int) -> None:
    """Build the algorithm as the run does before its models load (a plugin's factory may
    refuse what its params model let through): raises the run's
    :class:`~rlvr.api.host.PluginError`."""
    from rlvr.model.loading import resolve_device_dtype  # torch

    algorithm, model = config.algorithm, config.model
    if algorithm is None or model is None:
        return
    device, dtype = resolve_device_dtype(model.dtype)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    run = RunInfo.from_config(
        config,
        max_steps=planned_steps(config.training, rows, world),
        device=device,
        dtype=dtype,
        multi_turn=multi_turn(config, host),
    )
    record = host.algorithms[algorithm.name]
    build_algorithm(record, algorithm.params, run, requirements(config, host))


def _looks_missing(path: str) -> bool:
    p = Path(path).expanduser()
    return p.is_absolute() and not p.exists()


def _model(config: RunConfig) -> tuple[list[tuple[str, str]], Any]:
    """The model's config and tokenizer load (no weights): the problems, and the tokenizer
    when it loads. A model with ``trust_remote_code`` is only looked at (its config.json is
    read as JSON): loading it with transformers would run its Python files, and a check never
    runs code."""
    from rlvr.model.loading import (  # torch, transformers
        ModelLoadError,
        cached_on_hub,
        load_model_config,
        load_tokenizer,
        not_found,
    )

    cfg = config.model
    assert cfg is not None
    problems = []
    try:
        if cached_on_hub(cfg) is False:
            return [("model.name_or_path", not_found(cfg.name_or_path))], None
    except ModelLoadError as exc:
        return [("model.name_or_path", str(exc))], None
    if cfg.trust_remote_code:
        return _remote_code_model(cfg.name_or_path), None
    loaded = {}
    for what, load in (("config", load_model_config), ("tokenizer", load_tokenizer)):
        try:
            loaded[what] = _quiet(load, cfg)
        except ModelLoadError as exc:
            return [("model.name_or_path", str(exc))], None
        except Exception as exc:  # a broken file: say which part and why
            problems.append(("model.name_or_path", f"cannot read the model's {what}: {exc}"))
    return problems, loaded.get("tokenizer")


def _remote_code_model(name: str) -> list[tuple[str, str]]:
    """A local model directory's config.json parses (a hub id is checked when it loads)."""
    config = Path(name).expanduser() / "config.json"
    if not config.parent.is_dir():
        return []
    try:
        json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [("model.name_or_path", f"cannot read the model's config {str(config)!r}: {exc}")]
    return []


def _quiet(fn: Any, *args: Any) -> Any:
    """Run ``fn`` without third-party progress bars (they would interleave with messages)."""
    import datasets  # see the module doc

    enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        return fn(*args)
    finally:
        if enabled:
            datasets.enable_progress_bars()


def check(
    config: RunConfig,
    host: Host,
    *,
    source: str | None = None,
    overrides=(),
    rows: list[dict[str, Any]] | None = None,
    eval_rows: bool = False,
) -> None:
    """Raise :class:`rlvr.config.schema.ConfigError` listing every :func:`preflight` problem."""
    problems = preflight(config, host, rows, eval_rows=eval_rows)
    if problems:
        raise ConfigError(sort_problems(with_origins(problems, overrides), SECTIONS), source=source)
