"""The run's callbacks: the objects that observe a run, log it elsewhere, or stop it.

They come from the config (``callbacks:`` entries and the loggers ``training.report_to``
names, both callback plugins) and from a script (``rlvr.Trainer(callbacks=[...])``, where a
``transformers.TrainerCallback`` is driven as TRL's trainer drives it). The trainer calls
:meth:`Callbacks.call` on rank 0 at the points :class:`rlvr.api.runtime.RunCallback` lists;
each method gets only the keyword arguments its signature names.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from rlvr.api.errors import RlvrError
from rlvr.api.host import PluginHost
from rlvr.api.runtime import RunControl, RunInfo

logger = logging.getLogger("rlvr.training.callbacks")

#: The methods a callback may have, in the order a run calls them.
HOOKS = ("on_run_start", "on_step_end", "on_log", "on_evaluate", "on_save", "on_run_end")


def report_to_names(report_to: str | Sequence[str], host: PluginHost) -> list[str]:
    """The logger callbacks ``training.report_to`` names (``all``: every installed one)."""
    names = [report_to] if isinstance(report_to, str) else list(report_to)
    if "all" in names:
        return [n for n, r in host.callbacks.items() if r.logger and r.available() is None]
    return [n for n in dict.fromkeys(names) if n != "none"]


class ReportError(RlvrError, RuntimeError):
    """A logger ``training.report_to`` names (or a ``callbacks:`` entry) cannot run here."""


def unavailable(config: Any, host: PluginHost) -> list[tuple[str, str]]:
    """``(config path, what to install)`` for each configured callback that cannot run here
    (``report_to: all`` with no logger installed included); checked before any model loads."""
    report_to = config.training.report_to
    loggers = report_to_names(report_to, host)
    problems = []
    if not loggers and "all" in ([report_to] if isinstance(report_to, str) else report_to):
        known = ", ".join(n for n, r in host.callbacks.items() if r.logger)
        problems.append(("training.report_to", f"all: no logger is installed ({known})"))
    named = [("training.report_to", "training.report_to", n) for n in loggers]
    named += [(f"callbacks[{i}]", "callbacks", e.name) for i, e in enumerate(config.callbacks)]
    for path, where, name in named:
        missing = host.callbacks[name].available()
        if missing:
            problems.append((path, f"names {name!r} but {missing} (or remove it from {where})"))
    return problems


class Callbacks:
    """The callback objects of one run, and the :class:`RunControl` they share."""

    def __init__(self, objects: Iterable[tuple[str, Any]] = ()) -> None:
        self._objects = list(objects)
        self.control = RunControl()

    @classmethod
    def build(
        cls, config: Any, host: PluginHost, run: RunInfo, extra: Sequence[Any] = ()
    ) -> Callbacks:
        """Build the config's callbacks (``report_to``'s loggers first, then ``callbacks:``)
        and wrap ``extra`` objects; a factory's error propagates (before any model loads)."""
        objects: list[tuple[str, Any]] = []
        for name in report_to_names(config.training.report_to, host):
            record = host.callbacks[name]
            objects.append((name, record.factory(record.params(), run)))
        for entry in config.callbacks:
            record = host.callbacks[entry.name]
            objects.append((entry.name, record.factory(entry.params, run)))
        for obj in extra:
            objects.append((type(obj).__name__, adapt(obj, config)))
        return cls(objects)

    def call(self, hook: str, **kwargs: Any) -> None:
        """Call ``hook`` on every callback that has it; one that raises is reported once and
        dropped (a logger's network error must not end a run whose metrics.jsonl is safe),
        except in ``on_run_start``: before the first step, a callback that cannot start is a
        :class:`ReportError` (nothing is lost yet, and the user asked for it)."""
        kwargs.setdefault("control", self.control)
        if "metrics" in kwargs:
            kwargs["scalars"] = scalars(kwargs["metrics"])
        for item in list(self._objects):
            name, obj = item
            method = getattr(obj, hook, None)
            if not callable(method):
                continue
            try:
                method(**_accepted(method, kwargs))
            except Exception as exc:
                if hook == "on_run_start":
                    raise ReportError(
                        f"callback {name!r} could not start: {type(exc).__name__}: {exc}"
                    ) from exc
                self._objects.remove(item)
                logger.warning(
                    "callback %r failed in %s (%s: %s); it is not called again, the run goes on",
                    name,
                    hook,
                    type(exc).__name__,
                    exc,
                )


def _accepted(method: Callable[..., Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments ``method`` names (all of them when it takes ``**kwargs``)."""
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return dict(kwargs)
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return dict(kwargs)
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in kwargs.items() if k in names}


def scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a metrics line a logger plots (``step`` and ``resumed_from`` left out)."""
    return {
        k: float(v)
        for k, v in metrics.items()
        if isinstance(v, int | float)
        and not isinstance(v, bool)
        and k not in ("step", "resumed_from")
    }


def adapt(obj: Any, config: Any) -> Any:
    """``obj`` as a run calls it: a ``transformers.TrainerCallback`` wrapped, else itself."""
    if any(c.__name__ == "TrainerCallback" for c in type(obj).__mro__):
        return TransformersCallback(obj, config)
    if not any(callable(getattr(obj, hook, None)) for hook in HOOKS):
        raise TypeError(
            f"{type(obj).__name__} is not a callback: it has none of {', '.join(HOOKS)} "
            "(and is no transformers.TrainerCallback)"
        )
    return obj


class TransformersCallback:
    """A ``transformers.TrainerCallback`` called as TRL's ``GRPOTrainer`` calls it: with
    ``args`` (a ``TrainingArguments`` of the run's settings), a ``TrainerState`` and a
    ``TrainerControl``; ``control.should_training_stop`` ends the run after the step.
    Called: ``on_init_end``, ``on_train_begin``, ``on_step_end``, ``on_log``, ``on_evaluate``,
    ``on_save``, ``on_train_end`` (rlvr has no sub-steps to report)."""

    def __init__(self, callback: Any, config: Any) -> None:
        from transformers import TrainerControl, TrainerState  # the caller passed one of theirs

        self.callback = callback
        self.args = _training_arguments(config)
        self.state = TrainerState()
        self.state.is_world_process_zero = self.state.is_local_process_zero = True
        self.tc = TrainerControl()

    def _fire(self, event: str, control: RunControl, **kwargs: Any) -> None:
        method = getattr(self.callback, event, None)
        if method is None:
            return
        method(self.args, self.state, self.tc, **kwargs)
        if self.tc.should_training_stop:
            control.stop(f"{type(self.callback).__name__} set control.should_training_stop")

    def on_run_start(self, run: RunInfo, start_step: int, control: RunControl) -> None:
        self.state.max_steps, self.state.global_step = run.max_steps, start_step
        t = self.args
        self.state.logging_steps, self.state.save_steps = t.logging_steps, t.save_steps
        self._fire("on_init_end", control)
        self._fire("on_train_begin", control)

    def on_step_end(self, step: int, control: RunControl) -> None:
        self.state.global_step = step
        self._fire("on_step_end", control)

    def on_log(self, step: int, metrics: Mapping[str, Any], control: RunControl) -> None:
        logs = scalars(metrics)
        self.state.global_step = step  # rlvr logs a step's line before its on_step_end
        self.state.log_history.append({**logs, "step": step})
        self._fire("on_log", control, logs=logs)

    def on_evaluate(self, step: int, metrics: Mapping[str, Any], control: RunControl) -> None:
        self._fire("on_evaluate", control, metrics=scalars(metrics))

    def on_save(self, control: RunControl) -> None:
        self._fire("on_save", control)

    def on_run_end(self, control: RunControl) -> None:
        self._fire("on_train_end", control)


def _training_arguments(config: Any) -> Any:
    """A ``transformers.TrainingArguments`` with the run's settings under TRL's names."""
    from transformers import TrainingArguments  # the caller passed a TrainerCallback

    t = config.training
    return TrainingArguments(
        output_dir=str(t.output_dir),
        learning_rate=t.learning_rate,
        max_steps=max(t.max_steps, 1),
        num_train_epochs=t.num_train_epochs,
        per_device_train_batch_size=t.per_device_train_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        warmup_steps=t.warmup_steps,
        logging_steps=t.logging_steps,
        save_steps=t.save_steps,
        seed=t.seed,
        report_to="none",
        use_cpu=True,  # only read by a callback: no device is touched
    )


__all__ = [
    "HOOKS",
    "Callbacks",
    "ReportError",
    "unavailable",
    "TransformersCallback",
    "adapt",
    "report_to_names",
    "scalars",
]
