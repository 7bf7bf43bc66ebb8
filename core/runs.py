"""Python entry points for a run: :func:`validate`, :func:`train` and :func:`evaluate`, the same
pipeline as ``rlvr validate``, ``rlvr train`` and ``rlvr eval`` (which call these), and
:class:`Trainer`, the same run with the dataset and reward functions given as Python objects.

``config`` is a path to a YAML/TOML file or an already loaded :class:`~rlvr.RunConfig`;
``overrides`` are ``--set`` strings (``"training.max_steps=5"``), applied to a loaded config
too (it is validated again with them, as a file would be). Light to import: the trainer and
the evaluator (torch, transformers) load when a run starts.

A config never runs code on its own say: ``allow_code=True`` (``--allow-code``) lets a
``callable`` reward import the function it names, ``trust_remote_code=True``
(``--trust-remote-code``) lets ``model.trust_remote_code: true`` run the model directory's
Python files; without them such a config stops with :class:`~rlvr.config.schema.CodeOptInError`
before anything runs. ``validate`` never runs either.

Third-party progress bars and vLLM's INFO lines are hidden here as on the command line
(:func:`rlvr.outputs.console.quiet_third_party`; their own environment variables bring them
back, e.g. ``HF_HUB_DISABLE_PROGRESS_BARS=0``).
"""

from __future__ import annotations

import copy
import re
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rlvr.api.errors import ConfigWarning, RlvrError
from rlvr.api.host import PluginHost, create_host
from rlvr.api.usercode import function_name
from rlvr.config.schema import RunConfig, load_config
from rlvr.model.installation import check_installation
from rlvr.outputs.console import quiet_third_party
from rlvr.outputs.metrics import read_metrics
from rlvr.rewards.functions import FUNCTION_REWARD, FunctionPlugin, unpicklable
from rlvr.training.callbacks import adapt

#: The sections a training run needs (``rlvr validate`` checks the same).
TRAIN_SECTIONS = ("model", "data", "rewards", "algorithm", "backend")
#: The sections an evaluation needs.
EVAL_SECTIONS = ("model", "data", "rewards")


def plugin_host(*, quiet: bool = False) -> PluginHost:
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
    host: PluginHost | None = None,
    allow_code: bool = False,
    trust_remote_code: bool = False,
    resume: bool = False,
) -> RunConfig:
    """Load ``config`` and run every check ``train`` runs before a model loads (schema, plugin
    params, cross-plugin rules, the output directory, data files and columns, the model's
    config and chat template, the eval data and its judge, the opt-ins to run code), with the
    same warnings: raises :class:`~rlvr.ConfigError` listing every problem (or the
    :class:`~rlvr.RlvrError` that ``train`` stops with), else returns the resolved config.
    ``resume``: check as ``train(resume=True)`` does, the checkpoint it would continue from
    included. Nothing of the config's code runs here.

    The checks that need no model files come first and load no torch, so a config that fails
    them fails in a second (:mod:`rlvr.training.preflight`)."""
    from rlvr.training.preflight import check_resume  # tqdm, the reward pool: not for --help

    config = _checked(config, overrides, host, allow_code, trust_remote_code, resume)
    if resume:  # the run makes these under the directory's lock: see train()
        check_resume(config)
    return config


def _checked(
    config: str | Path | RunConfig,
    overrides: Sequence[str],
    host: PluginHost | None,
    allow_code: bool,
    trust_remote_code: bool,
    resume: bool,
) -> RunConfig:
    """:func:`validate` but for the checkpoint a resume continues from."""
    from rlvr.training.preflight import check, refuse_output_dir  # light: see validate()

    quiet_third_party()
    host = host or plugin_host()
    source = None if isinstance(config, RunConfig) else config
    config = _loaded(
        config,
        host,
        overrides=list(overrides),
        require=TRAIN_SECTIONS,
        allow_code=allow_code,
        trust_remote_code=trust_remote_code,
    )
    refuse_output_dir(config, resume=resume)
    check_installation()  # before torch loads: a broken torchvision stops every import of it
    check(config, host, source=None if source is None else str(source), overrides=list(overrides))
    return config


def _loaded(
    config: str | Path | RunConfig,
    host: PluginHost,
    *,
    overrides: list[str],
    require: tuple[str, ...],
    training: bool = True,
    allow_code: bool,
    trust_remote_code: bool,
) -> RunConfig:
    """``config`` loaded with ``overrides``. A loaded :class:`RunConfig` is returned as it is
    without overrides; with them it is validated again from its resolved values (its paths are
    already absolute) with the overrides applied, as the file was, so no override is lost and
    a wrong one is the same :class:`~rlvr.ConfigError` (the opt-ins to run code are asked again:
    the overrides may add code)."""
    if isinstance(config, RunConfig):
        if not overrides:
            return config
        source: str | Path | dict[str, Any] = config.model_dump(mode="json")
    else:
        source = config
    return load_config(
        source,
        host,
        overrides=overrides,
        require=require,
        training=training,
        allow_code=allow_code,
        trust_remote_code=trust_remote_code,
    )


def train(
    config: str | Path | RunConfig,
    *,
    overrides: Sequence[str] = (),
    resume: bool = False,
    progress: bool = True,
    host: PluginHost | None = None,
    allow_code: bool = False,
    trust_remote_code: bool = False,
) -> dict[str, Any]:
    """Validate ``config`` as :func:`validate` does, then train; returns the run's summary (the
    figures ``rlvr train`` prints at the end, :func:`rlvr.outputs.summary.summary_data`).
    Everything lands in ``training.output_dir``."""
    host = host or plugin_host()
    # The checkpoint's checks (its manifest hashed, its config compared) run once, in the run,
    # under the directory's lock.
    config = _checked(config, overrides, host, allow_code, trust_remote_code, resume)
    from rlvr.training.launch import run  # torch, transformers: after the checks

    return run(config, host, resume=resume, progress=progress).summary


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
    host: PluginHost | None = None,
    allow_code: bool = False,
    trust_remote_code: bool = False,
) -> dict[str, Any]:
    """Evaluate ``config``'s model (or ``checkpoint``) on held-out prompts, as ``rlvr eval``:
    returns the summary (mean rewards, accuracy and pass@k) and writes the samples."""
    quiet_third_party()
    host = host or plugin_host()
    greedy_set = ["training.temperature=0"] if greedy else []
    config = _loaded(
        config,
        host,
        overrides=[*overrides, *greedy_set],
        require=EVAL_SECTIONS,
        training=False,
        allow_code=allow_code,
        trust_remote_code=trust_remote_code,
    )
    check_installation()
    from rlvr.evaluation.evaluate import evaluate as run_eval  # torch: after the config's checks

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


# --------------------------------------------------------------------------- rlvr.Trainer

#: The keys a reward given as a mapping may have: its ``rewards:`` entry's and the call's.
_ENTRY_KEYS = ("label", "weight", "timeout", "fallback", "on_error", "correctness")
_CALL_KEYS = ("format", "kwargs", "batch")


class Trainer:
    """One training run from Python, e.g. in a notebook: the pipeline of ``rlvr train``, with
    the dataset and the reward functions given as Python objects, as TRL's ``GRPOTrainer``
    takes them::

        trainer = rlvr.Trainer("quickstart.yaml", dataset=ds, rewards=[accuracy])
        summary = trainer.train()

    - ``config``: a YAML/TOML file, a dict (the file's content; relative paths against the
      current directory) or a :class:`~rlvr.RunConfig`; ``overrides``: ``--set`` strings.
    - ``dataset``: the training rows (a ``datasets.Dataset`` or a list of dicts) instead of
      ``data.path``, which is then not used; the ``data:`` section may be left out.
      ``eval_dataset``: the rows of the in-training evaluation (``training.eval_steps``)
      instead of ``data.eval_path``.
    - ``rewards``: functions in TRL's signature, ``fn(prompts, completions, **kwargs) ->
      list[float | None]``, called as TRL calls them
      (:func:`rlvr.compat.trl.reward_call.call_trl_batch`), each a ``rewards:`` entry after the
      config's own, labelled ``fn.__name__``, weight 1. A mapping
      ``{"function": fn, "weight": 0.5, ...}`` sets the entry's other keys (``label``,
      ``weight``, ``timeout``, ``fallback``, ``on_error``, ``correctness``) and the call's
      (``format``, ``kwargs``, ``batch``). A string (or path) is a reward model, as in TRL's
      ``reward_funcs``: the ``reward_model`` reward of that model directory or hub id,
      labelled by its last path part.
    - ``callbacks``: objects that observe the run and may stop it, called after the config's
      ``callbacks:`` (the methods of :class:`rlvr.plugin.RunCallback`); a
      ``transformers.TrainerCallback`` is called as TRL's trainer calls it, and its
      ``control.should_training_stop`` ends the run after the step (saved, resumable).

    The functions run where every reward runs, in the reward worker processes: a call that
    hangs past its ``timeout`` or crashes costs that call, not the run. A function defined in
    a notebook or a script travels to the workers by value (its code and the globals it uses,
    pickled with dill); one that uses something that cannot be pickled (an open connection,
    a generator) is an error here. ``training.reward_workers: 0`` calls them in this process
    instead: anything goes, but there is no timeout and a crash takes the run down.

    The constructor runs every check ``rlvr validate`` runs (a :class:`~rlvr.ConfigError`
    lists the problems) and :attr:`config` is the resolved config; :meth:`train` trains.
    """

    def __init__(
        self,
        config: str | Path | Mapping[str, Any] | RunConfig,
        *,
        dataset: Any = None,
        eval_dataset: Any = None,
        rewards: Sequence[Callable[..., Any] | Mapping[str, Any]] = (),
        callbacks: Sequence[Any] = (),
        overrides: Sequence[str] = (),
        host: PluginHost | None = None,
        allow_code: bool = False,
        trust_remote_code: bool = False,
    ) -> None:
        # Loads datasets, which `rlvr --help` must not.
        from rlvr.data.prompts import dataset_rows
        from rlvr.training.preflight import check

        quiet_third_party()
        functions, entries = _function_entries(rewards)
        self.host = host or plugin_host()
        if functions:
            if FUNCTION_REWARD in self.host.rewards:
                raise RlvrError(
                    f"the plugin host already has a reward {FUNCTION_REWARD!r} (an earlier "
                    "rlvr.Trainer's functions?); give each Trainer with rewards= its own host"
                )
            plugin = FunctionPlugin(functions)
            self.host.add_plugin(plugin, name="rlvr.Trainer", dist=None, version=None)
        given = dataset is not None
        source: str | Path | dict[str, Any]
        if isinstance(config, RunConfig):
            source = config.model_dump(mode="json")
        elif isinstance(config, Mapping):
            source = copy.deepcopy(dict(config))
        else:
            source = config

        def amend(data: dict[str, Any]) -> dict[str, Any]:
            data = dict(data)
            if entries and isinstance(data.get("rewards") or [], list):
                data["rewards"] = [*(data.get("rewards") or []), *entries]
            section = data.get("data")
            if given and (section is None or isinstance(section, dict)):
                if section and section.get("path") is not None:
                    warnings.warn(
                        f"data.path {section['path']!r} is not used: the training rows are "
                        "rlvr.Trainer's dataset=",
                        ConfigWarning,
                        stacklevel=4,
                    )
                data["data"] = {**(section or {}), "path": None}
            return data

        require = tuple(s for s in TRAIN_SECTIONS if not (given and s == "data"))
        # The reward functions given here are the caller's own code: no opt-in. A config's
        # `callable` entries and trust_remote_code still need allow_code / trust_remote_code.
        self.config = load_config(
            source,
            self.host,
            overrides=list(overrides),
            require=require,
            amend=amend,
            allow_code=allow_code,
            trust_remote_code=trust_remote_code,
        )
        data = self.config.data
        assert data is not None  # required, or set by amend
        self.rows = None
        if given:
            self.rows = dataset_rows(dataset, what="dataset", max_samples=data.max_samples)
        self.eval_rows = None
        if eval_dataset is not None:
            self.eval_rows = dataset_rows(eval_dataset, what="eval_dataset")
        label = None if isinstance(source, dict) else str(source)
        check_installation()
        check(
            self.config,
            self.host,
            source=label,
            overrides=list(overrides),
            rows=self.rows,
            eval_rows=self.eval_rows is not None,
        )
        if functions and self.config.training.reward_workers > 0:
            _check_picklable(functions)
        # each one's shape checked (and a TrainerCallback wrapped) now, not at the run's start
        self.callbacks = [adapt(obj, self.config) for obj in callbacks]

    @property
    def output_dir(self) -> Path:
        """Where the run writes (``training.output_dir``)."""
        return Path(self.config.training.output_dir)

    def train(self, *, resume: bool = False, progress: bool = True) -> dict[str, Any]:
        """Train; return the run's summary (what ``rlvr train`` prints at the end:
        :func:`rlvr.outputs.summary.summary_data`). ``resume`` continues from the latest
        checkpoint in :attr:`output_dir`; ``progress`` shows the progress bar."""
        from rlvr.training.preflight import refuse_output_dir  # see validate()

        refuse_output_dir(self.config, resume=resume)  # before torch loads
        from rlvr.training.launch import run  # torch, transformers

        quiet_third_party()
        result = run(
            self.config,
            self.host,
            resume=resume,
            progress=progress,
            rows=self.rows,
            eval_rows=self.eval_rows,
            callbacks=self.callbacks,
        )
        return result.summary

    def metrics(self) -> list[dict[str, Any]]:
        """The run's ``metrics.jsonl``, one dict per line."""
        return read_metrics(self.output_dir)


def _function_entries(
    rewards: Sequence[Callable[..., Any] | Mapping[str, Any]],
) -> tuple[list[Callable[..., Any]], list[dict[str, Any]]]:
    """The reward functions and the ``rewards:`` entries that call them."""
    if callable(rewards) or isinstance(rewards, Mapping | str):
        rewards = [rewards]  # one function given bare
    functions: list[Callable[..., Any]] = []
    entries: list[dict[str, Any]] = []
    for i, item in enumerate(rewards):
        settings: dict[str, Any] = {}
        fn: Any = item
        if isinstance(item, Mapping):
            settings = dict(item)
            fn = settings.pop("function", None)
            unknown = sorted(set(settings) - {*_ENTRY_KEYS, *_CALL_KEYS})
            if unknown:
                keys = ", ".join(("function", *_ENTRY_KEYS, *_CALL_KEYS))
                raise RlvrError(f"rewards[{i}]: unknown keys {unknown}; a mapping has {keys}")
        if isinstance(fn, str | Path):  # TRL's reward_funcs=["model"]: a reward model
            entries.append(_reward_model_entry(i, str(fn), settings))
            continue
        if not callable(fn):
            raise RlvrError(
                f"rewards[{i}] is {type(fn).__name__}, not a function; give functions "
                "fn(prompts, completions, **kwargs) -> list[float | None] (plugin rewards such "
                "as answer or format go in the config's rewards: section)"
            )
        label = settings.pop("label", None) or getattr(fn, "__name__", None)
        if not isinstance(label, str) or not label.isidentifier():
            raise RlvrError(
                f"rewards[{i}] ({function_name(fn)}) has no name to log it by; give it one: "
                f'{{"function": fn, "label": "my_reward"}}'
            )
        params = {"function": function_name(fn), "index": len(functions)}
        params.update({k: settings.pop(k) for k in _CALL_KEYS if k in settings})
        functions.append(fn)
        entries.append({"name": FUNCTION_REWARD, "label": label, "params": params, **settings})
    return functions, entries


def _reward_model_entry(i: int, model: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The ``reward_model`` entry of a model given as a reward (a path or hub id)."""
    if "/" not in model and not Path(model).exists():
        raise RlvrError(
            f"rewards[{i}] is the string {model!r}: a string is a reward model (a model "
            "directory or a hub id org/name), as in TRL's reward_funcs; plugin rewards such as "
            "answer or format go in the config's rewards: section"
        )
    label = settings.pop("label", None) or re.sub(r"\W", "_", model.rstrip("/").split("/")[-1])
    params: dict[str, Any] = {"model": model}
    if "format" in settings:
        params["format"] = settings.pop("format")
    extra = sorted({"kwargs", "batch"} & set(settings))
    if extra:
        raise RlvrError(f"rewards[{i}] ({model!r}) is a reward model: it takes no {extra}")
    return {"name": "reward_model", "label": label, "params": params, **settings}


def _check_picklable(functions: Sequence[Callable[..., Any]]) -> None:
    """Every function can be sent to the reward workers, else one error naming each that
    cannot and the way out."""
    problems = [(fn, why) for fn in functions if (why := unpicklable(fn)) is not None]
    if problems:
        lines = "; ".join(f"{function_name(fn)}: {why}" for fn, why in problems)
        raise RlvrError(
            f"cannot send the reward function to the reward worker processes ({lines}); "
            "create what it uses inside the function, or set training.reward_workers: 0 to "
            "call it in this process (no timeout, and a crash stops the run)"
        )


__all__ = [
    "EVAL_SECTIONS",
    "TRAIN_SECTIONS",
    "Trainer",
    "evaluate",
    "plugin_host",
    "train",
    "validate",
]
