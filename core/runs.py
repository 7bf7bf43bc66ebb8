"""Python entry points for a run: :func:`validate`, :func:`train` and :func:`evaluate`, the same
pipeline as ``rlvr validate``, ``rlvr train`` and ``rlvr eval`` (which call these).

``config`` is a path to a YAML/TOML file or an already loaded :class:`~rlvr.RunConfig`;
``overrides`` are ``--set`` strings (``"training.max_steps=5"``). Light to import: the trainer
and the evaluator (torch, transformers) load when a run starts.

A config never runs code on its own say: ``allow_code=True`` (``--allow-code``) lets a
``callable`` reward import the function it names, ``trust_remote_code=True``
(``--trust-remote-code``) lets ``model.trust_remote_code: true`` run the model directory's
Python files; without them such a config stops with :class:`~rlvr.config.schema.CodeOptInError`
before anything runs. ``validate`` never runs either.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.api.host import Host, create_host
from rlvr.config.schema import RunConfig, load_config

#: The sections a training run needs (``rlvr validate`` checks the same).
TRAIN_SECTIONS = ("model", "data", "rewards", "algorithm", "backend")
#: The sections an evaluation needs.
EVAL_SECTIONS = ("model", "data", "rewards")


def plugin_host(*, quiet: bool = False) -> Host:
    """Every installed plugin, each failed one reported on stderr as a warning."""
    host = create_host()
    if not quiet:
        for failure in host.failures:
            print(f"warning: plugin {failure}", file=sys.stderr)
    return host


def validate(
    config: str | Path | RunConfig,
    *,
    overrides: Sequence[str] = (),
    host: Host | None = None,
    allow_code: bool = False,
    trust_remote_code: bool = False,
) -> RunConfig:
    """Load ``config`` and run every check ``train`` runs before a model loads (schema, plugin
    params, cross-plugin rules, data files and columns, the model's config, the opt-ins to
    run code): raises :class:`~rlvr.ConfigError` listing every problem, else returns the
    resolved config. Nothing of the config's code runs here."""
    # Loads torch, transformers and datasets (it reads the model's config and the data), which
    # `rlvr --help`, `rlvr plugins` and `import rlvr` must not.
    from rlvr.training.preflight import check

    host = host or plugin_host()
    source = None
    if not isinstance(config, RunConfig):
        source = config
        config = load_config(
            config,
            host,
            overrides=list(overrides),
            require=TRAIN_SECTIONS,
            allow_code=allow_code,
            trust_remote_code=trust_remote_code,
        )
    check(config, host, source=None if source is None else str(source), overrides=list(overrides))
    return config


def train(
    config: str | Path | RunConfig,
    *,
    overrides: Sequence[str] = (),
    resume: bool = False,
    progress: bool = True,
    host: Host | None = None,
    allow_code: bool = False,
    trust_remote_code: bool = False,
) -> dict[str, Any]:
    """Validate ``config`` as :func:`validate` does, then train; returns the run's summary (the
    figures ``rlvr train`` prints at the end). Everything lands in ``training.output_dir``."""
    from rlvr.training.trainer import train as run_training  # torch, transformers: see above

    host = host or plugin_host()
    config = validate(
        config,
        overrides=overrides,
        host=host,
        allow_code=allow_code,
        trust_remote_code=trust_remote_code,
    )
    return run_training(config, host, resume=resume, progress=progress)


def evaluate(
    config: str | Path | RunConfig,
    *,
    checkpoint: str | Path | None = None,
    overrides: Sequence[str] = (),
    greedy: bool = False,
    split: str | None = None,
    k: int = 1,
    limit: int | None = None,
    output: str | Path | None = None,
    metric: str | None = None,
    threshold: float | None = None,
    host: Host | None = None,
    allow_code: bool = False,
    trust_remote_code: bool = False,
) -> dict[str, Any]:
    """Evaluate ``config``'s model (or ``checkpoint``) on held-out prompts, as ``rlvr eval``:
    returns the summary (mean rewards, accuracy and pass@k) and writes the samples."""
    from rlvr.evaluation.evaluate import evaluate as run_eval  # torch, transformers: see above

    host = host or plugin_host()
    greedy_set = ["training.temperature=0"] if greedy else []
    if not isinstance(config, RunConfig):
        config = load_config(
            config,
            host,
            overrides=[*overrides, *greedy_set],
            require=EVAL_SECTIONS,
            training=False,
            allow_code=allow_code,
            trust_remote_code=trust_remote_code,
        )
    return run_eval(
        config,
        host,
        checkpoint=checkpoint,
        split=split,
        k=k,
        limit=limit,
        output=output,
        metric=metric,
        threshold=threshold,
    )


__all__ = ["EVAL_SECTIONS", "TRAIN_SECTIONS", "evaluate", "plugin_host", "train", "validate"]
