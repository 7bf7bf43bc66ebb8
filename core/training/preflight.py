"""Pre-flight: everything a run needs that the schema cannot see, checked before any weights
load, every problem reported at once with its path in the config.

``rlvr validate`` and ``rlvr train`` run the same :func:`preflight`: the data files exist and
their columns cover every field the prompt and the rewards need; the model's config and
tokenizer are readable (its weights are not loaded); the packages that ``report_to`` names are
installed. Paths in messages are absolute, so it is clear where rlvr looked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets

from rlvr.api.errors import RlvrError
from rlvr.api.host import Host
from rlvr.config.problems import sort_problems, with_origins
from rlvr.config.schema import SECTIONS, ConfigError, RunConfig
from rlvr.data.prompts import field_problems, load_rows
from rlvr.model.loading import (
    ModelLoadError,
    cached_on_hub,
    load_model_config,
    load_tokenizer,
    not_found,
)
from rlvr.outputs.metrics import reporters
from rlvr.outputs.rundir import not_a_directory


def preflight(
    config: RunConfig, host: Host, rows: list[dict[str, Any]] | None = None
) -> list[tuple[str, str]]:
    """``(config path, problem)`` for everything in ``config`` that would stop a run;
    ``rows``: the training rows when they come from memory, not ``data.path``."""
    problems = _report_to(config) + _output_dir(config)
    if config.data is not None:
        problems += _data(config, host, rows)
    if config.model is not None:
        problems += _model(config)
    return problems


def _report_to(config: RunConfig) -> list[tuple[str, str]]:
    try:
        reporters(config.training.report_to)
    except RlvrError as exc:
        return [("training.report_to", str(exc).removeprefix("training.report_to "))]
    return []


def _output_dir(config: RunConfig) -> list[tuple[str, str]]:
    """``training.output_dir`` is a directory, or can become one (no file in the way)."""
    root = Path(config.training.output_dir).absolute()
    if any(p.exists() and not p.is_dir() for p in (root, *root.parents)):
        return [("training.output_dir", not_a_directory(root).removeprefix("training.output_dir "))]
    return []


def _data(
    config: RunConfig, host: Host, rows: list[dict[str, Any]] | None
) -> list[tuple[str, str]]:
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
            return [*problems, (where, str(exc).removeprefix(f"{where} "))]
    if data.reasoning_gym is not None:  # its held-out split is made now too: cheap, and may fail
        try:
            _quiet(lambda: load_rows(data, split=data.eval_split or "test"))
        except RlvrError as exc:
            problems.append(("data.reasoning_gym", str(exc)))
    guidance = config.training.guidance
    return problems + field_problems(
        rows,
        config.rewards,
        host,
        prompt_field=data.prompt_field,
        guide_field=guidance.field if guidance is not None else None,
    )


def _looks_missing(path: str) -> bool:
    p = Path(path).expanduser()
    return p.is_absolute() and not p.exists()


def _model(config: RunConfig) -> list[tuple[str, str]]:
    """The model's config and tokenizer load (no weights). A model with
    ``trust_remote_code`` is only looked at (its config.json is read as JSON): loading it with
    transformers would run its Python files, and a check never runs code."""
    cfg = config.model
    assert cfg is not None
    problems = []
    try:
        if cached_on_hub(cfg) is False:
            return [("model.name_or_path", not_found(cfg.name_or_path))]
    except ModelLoadError as exc:
        return [("model.name_or_path", str(exc))]
    if cfg.trust_remote_code:
        return _remote_code_model(cfg.name_or_path)
    for what, load in (("config", load_model_config), ("tokenizer", load_tokenizer)):
        try:
            _quiet(load, cfg)
        except ModelLoadError as exc:
            return [("model.name_or_path", str(exc))]
        except Exception as exc:  # a broken file: say which part and why
            problems.append(("model.name_or_path", f"cannot read the model's {what}: {exc}"))
    return problems


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
) -> None:
    """Raise :class:`rlvr.config.schema.ConfigError` listing every :func:`preflight` problem."""
    problems = preflight(config, host, rows)
    if problems:
        raise ConfigError(sort_problems(with_origins(problems, overrides), SECTIONS), source=source)
