"""TRL compatibility: a pasted ``GRPOConfig`` translated into rlvr's sections, every key as
the table (:data:`rlvr.compat.trl.keys.TRL_KEYS`) decides, keeping TRL's meaning.

Where a pasted ``GRPOConfig`` goes:

- a top-level ``trl:`` section holds one verbatim: every key means what it means in TRL,
  batch sizes included (``per_device_train_batch_size`` counts *completions* there; rlvr's
  ``training.per_device_train_batch_size`` counts prompts), and step counts are TRL's
  optimizer steps. A key it leaves out has TRL's default where that differs from rlvr's
  (:data:`~rlvr.compat.trl.paste.TRL_DEFAULTS`: ``loss_type: dapo``, ``beta: 0``, 512
  completion tokens, 3 epochs, 8 completions per device step), unless the config sets it
  natively. :func:`move_trl_keys` translates it into rlvr's sections.
- under ``training:``, keys keep rlvr's meaning. TRL-only keys are accepted there too, with
  the same decisions; but a block with TRL-only keys (``bf16``, or ``beta``/``loss_type``,
  whose rlvr home is ``algorithm.params``) is shaped like a pasted GRPOConfig: next to
  ``per_device_train_batch_size``, which would then silently mean ``num_generations`` times
  the work, it is an error that says to use ``trl:``; without it, a warning says that rlvr's
  default batch and defaults hold there (:func:`_looks_pasted`). A block of names that rlvr
  shares with TRL only cannot be told from rlvr's own, and means rlvr's. TRL's
  ``steps_per_generation`` and ``generation_batch_size`` count in TRL's units: ``trl:`` only.

:func:`move_trl_keys` is the one entry point: the config loader calls it (and names
:data:`TRL_KEYS` through it, to suggest the nearest key).
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Mapping
from typing import Any

from rlvr.api.errors import ConfigWarning
from rlvr.api.host import PluginHost
from rlvr.compat.trl.keys import TRL_KEYS
from rlvr.compat.trl.paste import READ_DEFAULTS, TRL_SECTION, TRL_VERSION, Paste


def move_trl_keys(
    data: dict[str, Any],
    host: PluginHost,
    *,
    require: tuple[str, ...] = (),
    defaults: Mapping[str, str] | None = None,
    native: frozenset[str] = frozenset(),
    overridden: frozenset[str] = frozenset(),
) -> list[tuple[str, str]]:
    """Translate the TRL keys of ``data`` (the ``trl:`` section, and the TRL keys of
    ``training:`` that are not ``native`` rlvr keys) into rlvr's sections, in place, as
    :data:`TRL_KEYS` decides; returns the problems (``(path, message)``), warns for the
    ignored keys. ``require``: the sections the command needs (a key whose home is a section
    the command neither needs nor has is dropped: it only matters to another command);
    ``defaults``: the algorithm and backend names used when those sections are absent;
    ``overridden``: the keys ``--set`` gave (``training.output_dir``), which keep their value."""
    defaults = dict(defaults or {})
    problems: list[tuple[str, str]] = []
    training = data.get("training")
    markers: list[str] = []
    if isinstance(training, dict):
        training = data["training"] = dict(training)
        keys = [k for k in training if k in TRL_KEYS and (k not in native or _translates(k))]
        values = {k: training.pop(k) for k in keys}
        paste = Paste(data, host, "training", values, require, defaults, overridden)
        _translate(paste)
        problems += paste.problems
        markers = [k for k in values if k not in native]
        problems += _looks_pasted(data, markers)
    block = data.pop(TRL_SECTION, None)
    if block is not None and not isinstance(block, dict):
        problems.append((TRL_SECTION, "must be a mapping of TRL GRPOConfig keys"))
    elif block:
        paste = Paste(data, host, TRL_SECTION, block, require, defaults, overridden)
        for key in [k for k in block if k not in TRL_KEYS]:
            paste.values.pop(key)
            problems.append((f"{TRL_SECTION}.{key}", _not_trl(key, native)))
        paste.fill_defaults()
        _translate(paste)
        problems += paste.problems
    return problems


def _translates(key: str) -> bool:
    """A native rlvr key whose value needs reading as TRL's under ``training:`` too."""
    return key in ("warmup_steps", "eval_steps") or TRL_KEYS[key].kind != "mapped"


def _translate(paste: Paste) -> None:
    """Each key of ``paste`` by its :class:`TrlKey` (``use_vllm`` first: others read it)."""
    order = sorted(paste.values, key=lambda k: k != "use_vllm")
    for key in order:
        entry, value = TRL_KEYS[key], paste.values[key]
        if entry.apply is not None:
            entry.apply(paste, key, value)
        elif entry.kind == "mapped":
            paste.put(key, f"training.{key}", value)
        elif entry.kind == "moved":
            paste.put(key, entry.target, value)
        elif _inert(value, entry.inert):
            continue
        elif entry.kind == "ignored":
            paste.ignore(key, entry.reason)
        else:
            paste.problem(key, f"{value!r}: {entry.reason}; remove it")


def _inert(value: Any, inert: tuple[Any, ...]) -> bool:
    """Whether ``value`` is one of ``inert`` (``0`` is ``0.0``, but ``1`` is not ``True``)."""
    return any(
        value == v
        and isinstance(value, bool) == isinstance(v, bool)
        and (v is None) == (value is None)
        for v in inert
    )


def _looks_pasted(data: dict[str, Any], markers: list[str]) -> list[tuple[str, str]]:
    """A ``training:`` block shaped like a pasted GRPOConfig: ``markers``, keys that are TRL's
    and not rlvr's own ``training`` keys (``bf16``; ``beta`` or ``loss_type``, whose rlvr home
    is ``algorithm.params``). Beside ``per_device_train_batch_size``, which would then mean
    num_generations times the work (rlvr counts prompts), a problem; without it, a warning
    that rlvr's default batch (8 prompts, not TRL's 8 completions) and defaults hold."""
    training = data.get("training")
    if not markers or not isinstance(training, dict):
        return []
    size = training.get("per_device_train_batch_size")
    g = training.get("num_generations", READ_DEFAULTS["num_generations"])
    shown = ", ".join(markers[:3]) + (", ..." if len(markers) > 3 else "")
    if size is None:
        warnings.warn(
            f"training: holds TRL GRPOConfig keys ({shown}), and keeps rlvr's meaning and "
            f"defaults there: per_device_train_batch_size 8 prompts x num_generations {g} = "
            f"{_times(8, g)} completions a micro-batch (TRL's default: 8 completions), "
            "loss_type grpo (TRL's: dapo); to keep TRL's meaning, put the GRPOConfig under a "
            "top-level `trl:` section",
            ConfigWarning,
            stacklevel=4,
        )
        return []
    return [
        (
            "training.per_device_train_batch_size",
            f"counts prompts in rlvr ({size} prompts x num_generations {g} = {_times(size, g)} "
            f"completions a micro-batch) and completions in TRL, and this block has TRL-only "
            f"keys ({shown}): put a pasted "
            "GRPOConfig under a top-level `trl:` section, where every key keeps TRL's meaning, "
            "or keep rlvr's keys only under training:",
        )
    ]


def _times(a: Any, b: Any) -> Any:
    return a * b if isinstance(a, int) and isinstance(b, int) else "?"


def _not_trl(key: str, native: frozenset[str]) -> str:
    """Why a ``trl:`` key is no TRL key, with the nearest TRL key (never an rlvr one)."""
    msg = f"unknown key {key!r}: not in TRL {TRL_VERSION}'s GRPOConfig"
    if key in native:
        return msg + "; rlvr's own settings go under training:"
    close = difflib.get_close_matches(key, list(TRL_KEYS), n=1)
    return msg + (f"; did you mean {close[0]!r}?" if close else "")


__all__ = ["TRL_KEYS", "move_trl_keys"]
