"""TRL compatibility: every key of TRL 1.16's ``GRPOConfig`` is decided in one table,
:data:`TRL_KEYS`, and keeps TRL's meaning.

Where a pasted ``GRPOConfig`` goes:

- a top-level ``trl:`` section holds one verbatim: every key means what it means in TRL,
  batch sizes included (``per_device_train_batch_size`` counts *completions* there; rlvr's
  ``training.per_device_train_batch_size`` counts prompts), and step counts are TRL's
  optimizer steps. A key it leaves out has TRL's default where that differs from rlvr's
  (:data:`TRL_DEFAULTS`: ``loss_type: dapo``, ``beta: 0``, 512 completion tokens, 3 epochs, 8
  completions per device step), unless the config sets it natively. :func:`move_trl_keys`
  translates it into rlvr's sections.
- under ``training:``, keys keep rlvr's meaning. TRL-only keys are accepted there too, with
  the same decisions; but a block with TRL-only keys (``bf16``, or ``beta``/``loss_type``,
  whose rlvr home is ``algorithm.params``) is shaped like a pasted GRPOConfig: next to
  ``per_device_train_batch_size``, which would then silently mean ``num_generations`` times
  the work, it is an error that says to use ``trl:``; without it, a warning says that rlvr's
  default batch and defaults hold there (:func:`_looks_pasted`). A block of names that rlvr
  shares with TRL only cannot be told from rlvr's own, and means rlvr's. TRL's
  ``steps_per_generation`` and ``generation_batch_size`` count in TRL's units: ``trl:`` only.

Each key is one :class:`TrlKey`: ``mapped`` (an rlvr ``training`` key of the same name and
meaning), ``moved`` (another rlvr home, its value translated where TRL's unit differs),
``ignored`` (no effect in rlvr; a one-line :class:`ConfigWarning` says why, unless the value
is *inert*: asks for what rlvr does anyway), or ``error`` (asks for a behaviour rlvr lacks;
one problem line with the fix, unless the value is inert). A key's value-dependent handling
is its ``apply``. :func:`trl_keys_markdown` renders the table for the docs.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel

from rlvr.api.errors import ConfigWarning
from rlvr.api.host import PluginHost

Kind = Literal["mapped", "moved", "ignored", "error"]
#: TRL's version whose ``GRPOConfig`` fields the table decides (tests/trl_grpo_fields.txt).
TRL_VERSION = "1.16"
#: The top-level section that holds a pasted ``GRPOConfig`` with TRL's meaning.
TRL_SECTION = "trl"


@dataclass(frozen=True)
class TrlKey:
    """One ``GRPOConfig`` key: what rlvr does with it (see the module doc)."""

    kind: Kind
    #: where it lands in rlvr (``training.temperature``, ``algorithm.params.level``); for
    #: ignored and error keys, empty
    target: str = ""
    #: one line: why (ignored, error) or how the value is translated (mapped, moved)
    reason: str = ""
    #: values that ask for nothing rlvr does not do: accepted without a word
    inert: tuple[Any, ...] = ()
    #: value-dependent handling, ``apply(paste, key, value)`` (else the kind's default)
    apply: Callable[[_Paste, str, Any], None] | None = None


# --------------------------------------------------------------------------- the paste


_MISSING = object()
#: TRL's defaults of the keys the translation of another key reads.
_TRL_DEFAULTS = {
    "num_generations": 8,
    "gradient_accumulation_steps": 1,
    "logging_steps": 10,
    "num_iterations": 1,
    "eval_strategy": "no",
}
#: TRL 1.16's ``GRPOConfig`` defaults that differ from rlvr's and change what a run computes.
#: A ``trl:`` block is a GRPOConfig, so a key it leaves out takes TRL's default, not rlvr's
#: (unless the config sets it natively: ``algorithm.params.beta`` wins). The algorithm keys
#: apply only to ``grpo``, the algorithm of TRL's GRPOTrainer. ``tests/trl_fields.py`` records
#: TRL's own values and ``tests/test_trl_keys.py`` checks this table against them.
TRL_DEFAULTS = {
    "loss_type": "dapo",
    "beta": 0.0,
    "max_completion_length": 512,
    "num_train_epochs": 3.0,
    "per_device_train_batch_size": 8,
}
_ALGORITHM_DEFAULTS = ("loss_type", "beta")


class _Paste:
    """One block of TRL keys (``trl:`` or the TRL keys of ``training:``) being translated into
    ``data`` (changed in place); problems and warnings name the key where it was written."""

    def __init__(
        self,
        data: dict[str, Any],
        host: PluginHost,
        block: str,
        values: Mapping[str, Any],
        require: tuple[str, ...],
        defaults: Mapping[str, str],
        overridden: frozenset[str] = frozenset(),
    ) -> None:
        self.data, self.host, self.block, self.values = data, host, block, dict(values)
        self.require, self.defaults = require, defaults
        #: rlvr keys the command line set (``--set training.output_dir=...``): they win over
        #: the block's value, as a --set wins over the file
        self.overridden = overridden
        self.problems: list[tuple[str, str]] = []
        #: keys filled with TRL's default (:data:`TRL_DEFAULTS`): they yield to any value the
        #: config already has and are dropped, never a problem, where they cannot apply
        self.filled: set[str] = set()

    @property
    def trl(self) -> bool:
        """Whether this block has TRL's units (the ``trl:`` section)."""
        return self.block == TRL_SECTION

    def problem(self, key: str, message: str) -> None:
        if key not in self.filled:
            self.problems.append((f"{self.block}.{key}", message))

    def fill_defaults(self) -> None:
        """Give the keys this ``trl:`` block leaves out TRL's default (:data:`TRL_DEFAULTS`)."""
        algorithm = self.data.get("algorithm")
        name = algorithm.get("name") if isinstance(algorithm, dict) else None
        name = name or self.defaults.get("algorithm", "grpo")
        training = self.data.get("training")
        params = algorithm.get("params") if isinstance(algorithm, dict) else None
        native = {
            **(training if isinstance(training, dict) else {}),
            **(params if isinstance(params, dict) else {}),
        }
        for key, value in TRL_DEFAULTS.items():
            if key in self.values or key in native:
                continue
            if key in _ALGORITHM_DEFAULTS and name != "grpo":
                continue
            self.values[key] = value
            self.filled.add(key)

    def ignore(self, key: str, why: str) -> None:
        warnings.warn(f"{self.block}.{key} is ignored: {why}", ConfigWarning, stacklevel=5)

    def effective(self, key: str) -> Any:
        """``key``'s value as the run will see it: this block's, else ``training``'s, else (for
        ``num_iterations``) the algorithm's params', else TRL's default."""
        if key in self.values:
            return self.values[key]
        training = self.data.get("training")
        if isinstance(training, dict) and key in training:
            return training[key]
        if key == "num_iterations":
            algo = self.data.get("algorithm")
            params = algo.get("params") if isinstance(algo, dict) else None
            if isinstance(params, dict):
                for name in ("num_iterations", "num_ppo_epochs"):
                    if name in params:
                        return params[name]
        return _TRL_DEFAULTS.get(key)

    def backend(self) -> str:
        """The backend the run will use (``use_vllm`` counts, as in TRL)."""
        node = self.data.get("backend")
        if isinstance(node, dict) and "name" in node:
            return str(node["name"])
        if "use_vllm" in self.values:
            return "vllm" if self.values["use_vllm"] else "hf"
        return self.defaults.get("backend", "hf")

    def put(self, key: str, target: str, value: Any) -> None:
        """Set ``target`` (``section.key`` or ``algorithm.params.key``) to ``value``; a
        different value already there is a problem. A section this command does not use (and
        that is absent) is left alone: the key only matters for another command."""
        section, *rest = target.split(".")
        if self.trl and target in self.overridden:  # under training: the --set value is this one
            return
        node = self.data.get(section)
        if node is None:
            if section != "training" and section not in self.require:
                return
            if section in ("model", "data"):
                return  # required and absent: reported as a missing section
            node = {}
            if section in self.defaults and rest[0] != "name":
                node["name"] = self.defaults[section]
        if not isinstance(node, dict):
            return  # a malformed section: validation reports it
        node = self.data[section] = dict(node)
        if rest[0] == "params" and section in ("algorithm", "backend"):
            self._put_param(key, section, node, rest[1], value)
            return
        attr = rest[0]
        if key in self.filled and attr in node:
            return
        if attr in node and node[attr] != value:
            where = f"{section}.{attr}"
            self.problem(key, f"also set as {where} ({node[attr]!r}); keep only one")
            return
        node[attr] = value

    def _put_param(
        self, key: str, section: str, node: dict[str, Any], field: str, value: Any
    ) -> None:
        record = self.host.records[section].get(str(node.get("name")))
        if record is None:
            return  # an unknown plugin name is reported on its own
        names = _param_names(record.params, field)
        if names is None:
            owners = [n for n, r in self.host.records[section].items() if field in _fields(r)]
            have = f" ({', '.join(owners)} have it)" if owners else ""
            self.problem(
                key,
                f"TRL's {key} is {section}.params.{field}, which {section} {record.name!r} "
                f"does not have{have}",
            )
            return
        params = node["params"] = dict(node.get("params") or {})
        given = [n for n in names if n in params]
        if given and key in self.filled:
            return
        if given and params[given[0]] != value:
            self.problem(key, f"also set as {section}.params.{given[0]}; keep only one")
        elif not given:
            params[field] = value


def _fields(record: Any) -> set[str]:
    return set(record.params.model_fields)


def _param_names(model: type[BaseModel], field: str) -> list[str] | None:
    """``field`` and its aliases in a params model, or None when it has no such field."""
    info = model.model_fields.get(field)
    if info is None:
        return None
    alias = info.validation_alias
    extra = [str(c) for c in alias.choices] if isinstance(alias, AliasChoices) else []
    return [field, *(a for a in extra if a != field)]


# --------------------------------------------------------------------------- value handling


def _steps(p: _Paste, key: str, value: Any) -> None:
    """A step count: TRL counts optimizer steps, rlvr rollouts of ``num_iterations`` updates
    each; and TRL reads a value below 1 as a ratio of the run's steps."""
    target = f"training.{key}"
    if not p.trl:
        p.put(key, target, value)
        return
    if key != "max_steps" and isinstance(value, float) and 0 < value < 1:
        p.problem(key, f"{value} is a ratio of the run's steps in TRL; give a step count")
        return
    mu = p.effective("num_iterations")
    if not isinstance(value, int | float) or not isinstance(mu, int) or mu <= 1 or value <= 0:
        p.put(key, target, int(value) if isinstance(value, float) and value.is_integer() else value)
        return
    if value % mu:
        p.problem(
            key,
            f"TRL counts optimizer steps and rlvr steps of num_iterations {mu} updates each "
            f"(one generation); {value:g} is not a whole number of them: use a multiple of {mu}",
        )
        return
    p.put(key, target, int(value // mu))


def _batch(p: _Paste, key: str, value: Any) -> None:
    """TRL's ``per_device_train_batch_size`` counts completions; rlvr's counts prompts."""
    if not p.trl or not isinstance(value, int) or isinstance(value, bool):
        p.put(key, "training.per_device_train_batch_size", value)
        return
    g, accum = p.effective("num_generations"), p.effective("gradient_accumulation_steps")
    if not isinstance(g, int) or g < 1:
        p.put(key, "training.per_device_train_batch_size", value)  # num_generations: reported
        return
    if value % g == 0:
        p.put(key, "training.per_device_train_batch_size", value // g)
        return
    fix = f"use a multiple of {g}"
    if key in p.filled:  # TRL refuses it too: its generation batch must hold whole groups
        p.problems.append(
            (
                f"{p.block}.{key}",
                f"left out, so TRL's default of {value} completions, which are not whole groups "
                f"of num_generations {g}: set it ({fix})",
            )
        )
        return
    if isinstance(accum, int) and (value * accum) % g == 0:
        fix += (
            f", e.g. {g} with gradient_accumulation_steps: {value * accum // g} for the same "
            f"{value * accum} completions per step"
        )
    p.problem(
        key,
        f"{value} completions are not whole groups of num_generations {g}; rlvr's micro-batches "
        f"hold whole groups: {fix}",
    )


def _generation_batch(p: _Paste, key: str, value: Any) -> None:
    """``steps_per_generation`` / ``generation_batch_size``: rlvr generates once per optimizer
    step, TRL's default (``steps_per_generation = gradient_accumulation_steps``)."""
    if value is None:
        return
    accum = p.effective("gradient_accumulation_steps")
    why = (
        "rlvr generates once per optimizer step (TRL's default, steps_per_generation = "
        "gradient_accumulation_steps); for several updates per generation set "
        "algorithm.params.num_iterations"
    )
    if not p.trl:
        p.problem(key, f"counts in TRL's units: paste the GRPOConfig under `trl:`; {why}")
        return
    if key == "steps_per_generation":
        if value != accum:
            p.problem(key, f"{value} != gradient_accumulation_steps {accum}: {why}")
        return
    world = int(os.environ.get("WORLD_SIZE", "1"))
    per = p.effective("per_device_train_batch_size")
    step = per * world * accum if isinstance(per, int) and isinstance(accum, int) else None
    if value != step:
        p.problem(
            key,
            f"{value} completions per generation != per_device_train_batch_size x processes x "
            f"gradient_accumulation_steps ({step}): {why}",
        )


def _warmup(p: _Paste, key: str, value: Any) -> None:
    """transformers 5 reads ``warmup_steps`` below 1 as a ratio of the run's updates; a count
    is TRL's optimizer steps in ``trl:``, divided by ``num_iterations`` as ``max_steps``."""
    if isinstance(value, float) and 0 < value < 1:
        p.put(key, "training.warmup_ratio", value)
    else:
        _steps(p, key, value)


_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
_MAX_TOKENS = ("max_tokens", "max_new_tokens")


def _generation_kwargs(p: _Paste, key: str, value: Any) -> None:
    value = _mapping(p, key, value)
    if value is None:
        return
    for name, v in value.items():
        if name in _SAMPLING:
            p.put(f"{key}.{name}", f"training.{name}", v)
        elif name in _MAX_TOKENS:
            p.put(f"{key}.{name}", "training.max_completion_length", v)
        elif name == "do_sample" and v is True:
            continue
        else:
            p.problem(
                f"{key}.{name}",
                "rlvr's backends sample with training.temperature, top_p, top_k, min_p, "
                f"repetition_penalty and max_completion_length only; {name} has no equivalent",
            )


_MODEL_KWARGS = {
    "dtype": "model.dtype",
    "torch_dtype": "model.dtype",
    "attn_implementation": "model.attn_implementation",
    "revision": "model.revision",
    "trust_remote_code": "model.trust_remote_code",
}


def _model_init_kwargs(p: _Paste, key: str, value: Any) -> None:
    value = _mapping(p, key, value)
    if value is None:
        return
    for name, v in value.items():
        target = _MODEL_KWARGS.get(name)
        if target is None:
            p.problem(
                f"{key}.{name}",
                "rlvr loads the model itself from the model: section, which takes dtype, "
                f"attn_implementation, revision and trust_remote_code; {name} has no equivalent",
            )
            continue
        if target == "model.dtype" and isinstance(v, str):
            v = v.removeprefix("torch.")
        p.put(f"{key}.{name}", target, v)


def _mapping(p: _Paste, key: str, value: Any) -> dict[str, Any] | None:
    """A dict-valued TRL key (TRL also takes it as a JSON string); None and {} ask nothing."""
    if isinstance(value, str):
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(value)
    if value is None or value == {}:
        return None
    if not isinstance(value, dict):
        p.problem(key, f"must be a mapping, e.g. {{key: value}} (got {value!r})")
        return None
    return value


def _chat_template_kwargs(p: _Paste, key: str, value: Any) -> None:
    value = _mapping(p, key, value)
    if value is not None:
        p.put(key, "data.chat_template_kwargs", value)


def _use_vllm(p: _Paste, key: str, value: Any) -> None:
    p.put(key, "backend.name", "vllm" if value else "hf")
    if value and "vllm_importance_sampling_correction" not in p.values:
        warnings.warn(
            f"{p.block}.use_vllm: TRL corrects for vLLM's sampling by default "
            "(vllm_importance_sampling_correction, mode sequence_mask); rlvr does not unless "
            "algorithm.params.importance_sampling_correction: true (truncated per token, "
            "TRL's token_truncate)",
            ConfigWarning,
            stacklevel=4,
        )


def _vllm_param(param: str) -> Callable[[_Paste, str, Any], None]:
    """A vLLM setting: the vllm backend's ``param``; without vLLM unused, as in TRL."""

    def apply(p: _Paste, key: str, value: Any) -> None:
        if p.backend() == "vllm":
            p.put(key, f"backend.params.{param}", value)

    return apply


def _vllm_mode(p: _Paste, key: str, value: Any) -> None:
    if value != "colocate":
        p.problem(
            key,
            f"{value!r}: rlvr's vllm backend runs vLLM in the training process (TRL's "
            "'colocate'); there is no server mode: remove it or set 'colocate'",
        )


def _is_correction(p: _Paste, key: str, value: Any) -> None:
    """TRL's vLLM importance-sampling correction: rlvr's is TRL's ``token_truncate`` mode."""
    if p.backend() != "vllm" or not value:
        if p.backend() == "vllm":
            p.put(key, "algorithm.params.importance_sampling_correction", False)
        return  # TRL applies it with vLLM only
    mode = p.values.get("vllm_importance_sampling_mode", "sequence_mask")
    if mode != "token_truncate":
        p.problem(
            key,
            f"TRL's mode {mode!r} (its default is sequence_mask) is not in rlvr, whose "
            "correction truncates per token: set vllm_importance_sampling_mode: token_truncate, "
            "or vllm_importance_sampling_correction: false",
        )
        return
    p.put(key, "algorithm.params.importance_sampling_correction", True)


def _is_cap(p: _Paste, key: str, value: Any) -> None:
    on = p.values.get("vllm_importance_sampling_correction", False)
    if p.backend() == "vllm" and on and value is not None:
        p.put(key, "algorithm.params.importance_sampling_cap", value)


def _loss_type(p: _Paste, key: str, value: Any) -> None:
    if value == "cispo":
        p.problem(key, "TRL's cispo loss is rlvr's algorithm: set algorithm.name: cispo instead")
    elif value in ("sapo", "luspo", "vespo"):
        p.problem(
            key,
            f"rlvr has no {value} loss; its losses: grpo, bnpo, dapo, dr_grpo (and the cispo "
            "and gspo algorithms)",
        )
    else:
        p.put(key, "algorithm.params.loss_type", value)


def _aggregation(p: _Paste, key: str, value: Any) -> None:
    if value != "sum_then_normalize":
        p.problem(
            key,
            f"{value!r}: rlvr sums the weighted rewards, then normalises the sum per group "
            "(TRL's sum_then_normalize, its default); per-reward normalisation (GDPO) would "
            "be an algorithm plugin: remove the key to train with sum_then_normalize",
        )


def _eval_strategy(p: _Paste, key: str, value: Any) -> None:
    """TRL evaluates every ``eval_steps`` (default: ``logging_steps``) with ``steps`` and never
    with ``no`` (its default, ``eval_steps`` or not); rlvr whenever ``eval_steps`` is set."""
    steps = p.values.get("eval_steps")
    if value == "no":
        if steps is not None and not p.trl:
            p.problem(
                key, "'no' turns evaluation off but training.eval_steps turns it on; keep one"
            )
        return
    if value != "steps":
        p.problem(
            key,
            f"{value!r}: rlvr evaluates every training.eval_steps steps; set eval_strategy: "
            "steps with eval_steps (steps per epoch = rows / prompts per step)",
        )
        return
    if steps is None:
        _steps(p, "eval_steps", p.effective("logging_steps"))
    if p.trl:  # TRL's eval: sampled with the training settings, num_generations_eval each
        p.put(key, "training.eval_sampling", "train")
        n = p.values.get("num_generations_eval") or p.effective("num_generations")
        p.put(key, "training.eval_num_generations", n)
        if "eval_on_start" not in p.values:
            p.put(key, "training.eval_on_start", False)


def _eval_steps(p: _Paste, key: str, value: Any) -> None:
    if not p.trl:
        p.put(key, "training.eval_steps", value)
    elif p.values.get("eval_strategy", "no") == "steps":
        _steps(p, key, value)
    elif value is not None:
        p.ignore(key, "eval_strategy is 'no' (TRL's default): TRL does not evaluate either")


def _eval_generations(p: _Paste, key: str, value: Any) -> None:
    if value is None or (p.trl and p.values.get("eval_strategy") == "steps"):
        return  # with eval_strategy: steps, _eval_strategy sets it
    p.put(key, "training.eval_num_generations", value)
    if value > 1:
        p.put(key, "training.eval_sampling", "train")


def _save_strategy(p: _Paste, key: str, value: Any) -> None:
    if value == "no":
        p.ignore(
            key,
            "rlvr always saves the last step (and a stopped run) for --resume, and every "
            "training.save_steps: raise save_steps to save fewer",
        )
    elif value != "steps":
        p.problem(
            key,
            f"{value!r}: rlvr saves every training.save_steps steps; set save_strategy: steps "
            "with save_steps (steps per epoch = rows / prompts per step)",
        )


def _logging_strategy(p: _Paste, key: str, value: Any) -> None:
    if value != "steps":
        p.ignore(key, "rlvr logs every step to metrics.jsonl and prints every logging_steps")


def _fsdp(p: _Paste, key: str, value: Any) -> None:
    if value is True:
        value = "full_shard"
    options = value.split() if isinstance(value, str) else list(value or [])
    if not options:
        return
    p.put(key, "training.parallelism", "fsdp")
    if "offload" in options:
        p.put(key, "training.fsdp_cpu_offload", True)


def _inert_or(kind: Kind, reason: str, *inert: Any) -> TrlKey:
    return TrlKey(kind, reason=reason, inert=inert)


def _moved(target: str, reason: str = "", apply: Any = None) -> TrlKey:
    return TrlKey("moved", target, reason or "same meaning", apply=apply)


def _mapped(reason: str = "same name and meaning", apply: Any = None) -> TrlKey:
    return TrlKey("mapped", "", reason, apply=apply)


def _algo(field: str, reason: str = "same meaning") -> TrlKey:
    return _moved(f"algorithm.params.{field}", reason)


def _group(kind: Kind, reason: str, **defaults: Any) -> dict[str, TrlKey]:
    """One decision for several keys (e.g. every ``hub_*`` key), each inert at its TRL
    default (given as ``key=default``)."""
    return {k: TrlKey(kind, reason=reason, inert=(v,)) for k, v in defaults.items()}


# --------------------------------------------------------------------------- the table

_HUB = "rlvr does not push to the Hub; upload training.output_dir yourself"
_EVAL = "rlvr's eval generates and scores (rewards, pass@k): no loss, logits or metrics fn"
_LOADER = "rlvr reads the prompts in-process; there is no DataLoader"
_DDP = "rlvr sets up DDP itself (torchrun, training.parallelism)"
_VLLM_SERVER = "server mode only; rlvr runs vLLM in the training process"
_COMPILE = "rlvr does not torch.compile the model"
_LOG = "rlvr logs every step to metrics.jsonl (rank 0) and prints every logging_steps"

#: Every key of TRL's ``GRPOConfig`` (its own and those it inherits from transformers'
#: ``TrainingArguments``), and a few of older TRL versions (:data:`OLDER_TRL_KEYS`).
TRL_KEYS: dict[str, TrlKey] = {
    # ---- same name and meaning as rlvr's training key
    "output_dir": _mapped(),
    "seed": _mapped(),
    "learning_rate": _mapped(),
    "adam_beta1": _mapped(),
    "adam_beta2": _mapped(),
    "adam_epsilon": _mapped(),
    "weight_decay": _mapped(),
    "optim": _mapped("same meaning; rlvr has adamw_torch, adamw_torch_fused, adamw, sgd"),
    "lr_scheduler_type": _mapped(
        "same meaning; rlvr has linear, cosine, constant, constant_with_warmup, cosine_with_min_lr"
    ),
    "warmup_steps": _mapped(
        "in trl: TRL's optimizer steps, divided by num_iterations as max_steps; below 1 a "
        "ratio of the run's updates (transformers 5), i.e. training.warmup_ratio",
        _warmup,
    ),
    "max_grad_norm": _mapped(),
    "gradient_accumulation_steps": _mapped(),
    "num_generations": _mapped(),
    "max_completion_length": _mapped(),
    "num_train_epochs": _mapped("same meaning (each prompt once per epoch)"),
    "temperature": _mapped(),
    "top_p": _mapped(),
    "top_k": _mapped("same meaning (0: off)"),
    "min_p": _mapped(),
    "repetition_penalty": _mapped(),
    "save_total_limit": _mapped(),
    "report_to": _mapped(
        "same meaning; rlvr has none, tensorboard, wandb, trackio, mlflow, all (and any logger "
        "plugin)"
    ),
    "gradient_checkpointing": _mapped(),
    "eval_on_start": _mapped(),
    "per_device_train_batch_size": _mapped(
        "in trl: completions, divided by num_generations into rlvr's prompts (must be whole "
        "groups); under training: rlvr's prompts",
        _batch,
    ),
    "max_steps": _mapped(
        "in trl: TRL's optimizer steps, divided by num_iterations into rlvr's steps", _steps
    ),
    "save_steps": _mapped("in trl: divided by num_iterations, as max_steps", _steps),
    "logging_steps": _mapped("in trl: divided by num_iterations, as max_steps", _steps),
    "eval_steps": _mapped(
        "in trl: only with eval_strategy: steps (as in TRL), divided by num_iterations",
        _eval_steps,
    ),
    # ---- another home in rlvr
    "beta": _algo("beta"),
    "epsilon": _algo("epsilon"),
    "epsilon_high": _algo("epsilon_high"),
    "delta": _algo("delta"),
    "num_iterations": _algo("num_iterations"),
    "scale_rewards": _algo("scale_rewards", "same meaning (true: group, false: none)"),
    "mask_truncated_completions": _algo("mask_truncated_completions"),
    "importance_sampling_level": _algo("level", "same meaning (token or sequence)"),
    "loss_type": _moved(
        "algorithm.params.loss_type",
        "grpo, bnpo, dapo, dr_grpo; cispo is rlvr's cispo algorithm; sapo, luspo, vespo: errors",
        _loss_type,
    ),
    "trust_remote_code": _moved("model.trust_remote_code"),
    "model_init_kwargs": _moved(
        "model.*",
        "dtype/torch_dtype -> model.dtype, attn_implementation, revision, trust_remote_code; "
        "other kwargs: errors",
        _model_init_kwargs,
    ),
    "shuffle_dataset": _moved("data.shuffle"),
    "chat_template_kwargs": _moved(
        "data.chat_template_kwargs",
        "passed to apply_chat_template (e.g. enable_thinking)",
        _chat_template_kwargs,
    ),
    "generation_kwargs": _moved(
        "training.*",
        "temperature, top_p, top_k, min_p, repetition_penalty, max_tokens/max_new_tokens "
        "(-> max_completion_length); other kwargs: errors",
        _generation_kwargs,
    ),
    "use_vllm": _moved("backend.name", "true: vllm, false: hf", _use_vllm),
    "vllm_gpu_memory_utilization": _moved(
        "backend.params.gpu_memory_utilization",
        "with backend vllm",
        _vllm_param("gpu_memory_utilization"),
    ),
    "vllm_tensor_parallel_size": _moved(
        "backend.params.tensor_parallel_size",
        "with backend vllm",
        _vllm_param("tensor_parallel_size"),
    ),
    "vllm_max_model_length": _moved(
        "backend.params.max_model_len", "with backend vllm", _vllm_param("max_model_len")
    ),
    "vllm_enable_sleep_mode": _moved(
        "backend.params.sleep_mode", "with backend vllm", _vllm_param("sleep_mode")
    ),
    "vllm_importance_sampling_correction": _moved(
        "algorithm.params.importance_sampling_correction",
        "with backend vllm; rlvr's correction is TRL's token_truncate mode (other modes: errors)",
        _is_correction,
    ),
    "vllm_importance_sampling_mode": _moved(
        "algorithm.params.importance_sampling_correction",
        "token_truncate only (read with vllm_importance_sampling_correction)",
        lambda p, key, value: None,
    ),
    "vllm_importance_sampling_clip_max": _moved(
        "algorithm.params.importance_sampling_cap", "with the correction on", _is_cap
    ),
    "vllm_importance_sampling_cap": _moved(
        "algorithm.params.importance_sampling_cap", "deprecated TRL name of clip_max", _is_cap
    ),
    "per_device_eval_batch_size": _moved(
        "training.eval_batch_size", "completions per eval generation call"
    ),
    "num_generations_eval": _moved(
        "training.eval_num_generations",
        "sampled with the training settings (eval_sampling: train), as TRL does",
        _eval_generations,
    ),
    "eval_strategy": _moved(
        "training.eval_steps",
        "steps: evaluate every eval_steps (default logging_steps), sampled, no eval at step 0 "
        "unless eval_on_start; no: never; epoch: error",
        _eval_strategy,
    ),
    "fsdp": _moved(
        "training.parallelism",
        "any sharding: fsdp (FSDP2, per decoder layer); offload: fsdp_cpu_offload",
        _fsdp,
    ),
    # ---- value-dependent: some values are errors
    "steps_per_generation": TrlKey(
        "error",
        reason="in trl: must equal gradient_accumulation_steps (rlvr generates once per "
        "optimizer step; more updates per generation: algorithm.params.num_iterations)",
        apply=_generation_batch,
    ),
    "generation_batch_size": TrlKey(
        "error",
        reason="in trl: must equal per_device_train_batch_size x processes x "
        "gradient_accumulation_steps (one generation per optimizer step)",
        apply=_generation_batch,
    ),
    "multi_objective_aggregation": TrlKey(
        "error",
        reason="sum_then_normalize is what rlvr does; normalize_then_sum (GDPO) is not in rlvr",
        apply=_aggregation,
    ),
    "vllm_mode": TrlKey(
        "error",
        reason="colocate is rlvr's vllm backend; server mode is not in rlvr",
        apply=_vllm_mode,
    ),
    "save_strategy": TrlKey(
        "ignored",
        reason="steps: save_steps; no: rlvr still saves the last step (for --resume); "
        "epoch, best: errors",
        apply=_save_strategy,
    ),
    "logging_strategy": TrlKey("ignored", reason=_LOG, apply=_logging_strategy),
    "reward_weights": TrlKey(
        "error",
        reason="each rewards[] entry has its own weight: the message spells them out",
        apply=lambda p, key, value: p.problems.extend(_reward_weights(p.block, value)),
    ),
    "vllm_importance_sampling_clip_min": _inert_or(
        "error", "rlvr's correction only truncates from above (importance_sampling_cap)", None
    ),
    "router_aux_loss_coef": _inert_or("error", "rlvr adds no MoE load-balancing loss", None),
    "sync_ref_model": _inert_or(
        "error",
        "rlvr's reference model stays the initial policy (TR-DPO sync is not in rlvr)",
        False,
    ),
    "top_entropy_quantile": _inert_or(
        "error", "rlvr keeps every token in the loss (no entropy masking)", 1.0
    ),
    "entropy_coef": _inert_or("error", "rlvr adds no entropy bonus to the loss", 0.0),
    "use_adaptive_entropy": _inert_or("error", "rlvr adds no entropy bonus to the loss", False),
    "off_policy_mask_threshold": _inert_or(
        "error", "rlvr has no off-policy sequence masking (DeepSeek-V3.2)", None
    ),
    "max_tool_calling_iterations": _inert_or(
        "error", "rlvr generates one completion per sample: no tool calling", None
    ),
    "vllm_structured_outputs_regex": _inert_or(
        "error", "rlvr's vllm backend has no structured outputs", None
    ),
    "neftune_noise_alpha": _inert_or("error", "rlvr adds no NEFTune noise", None),
    "auto_find_batch_size": _inert_or(
        "error", "breaks whole groups per batch (TRL rejects it too)", False
    ),
    "lr_scheduler_kwargs": _inert_or(
        "error", "rlvr's schedulers take no kwargs (cosine_with_min_lr: min_lr_rate 0.1)", None, {}
    ),
    "optim_args": _inert_or("error", "rlvr's optimizers take no extra args", None, ""),
    "optim_target_modules": _inert_or(
        "error", "rlvr has no GaLore/APOLLO optimizers (model.lora trains adapters)", None
    ),
    "deepspeed": _inert_or(
        "error",
        "rlvr does not run DeepSpeed; training.parallelism: fsdp shards the policy",
        None,
        "",
        {},
    ),
    "parallelism_config": _inert_or(
        "error", "rlvr's parallelism is training.parallelism: ddp or fsdp", None
    ),
    "resume_from_checkpoint": _inert_or(
        "error", "resume with rlvr train --resume (output_dir's latest checkpoint)", None, False
    ),
    # ---- no effect in rlvr
    "bf16": _inert_or("ignored", "rlvr picks bf16 on CUDA automatically (model.dtype)"),
    "fp16": _inert_or("ignored", "rlvr picks the dtype automatically (model.dtype)", False),
    "tf32": _inert_or(
        "ignored",
        "rlvr trains in model.dtype (bfloat16 on CUDA), where TF32 does not apply; float32 "
        "matmuls keep torch's default",
        None,
    ),
    "disable_dropout": _inert_or(
        "ignored", "rlvr always disables dropout (policy, reference, value model)", True
    ),
    "cast_lm_head_to_fp32": _inert_or(
        "ignored", "rlvr computes the head's log-probabilities in float32 chunks", False
    ),
    "remove_unused_columns": _inert_or("ignored", "rlvr passes every column to the rewards", False),
    "pad_to_multiple_of": _inert_or(
        "ignored", "rlvr pads each batch to its longest sequence", "auto", None
    ),
    "ds3_gather_for_generation": _inert_or("ignored", "DeepSpeed only", True),
    "cache_implementation": _inert_or(
        "ignored", "the hf backend uses generate()'s default cache", None
    ),
    "vllm_model_impl": _inert_or("ignored", "rlvr's vllm backend uses vLLM's own", "vllm"),
    "use_bias_correction_kl": _inert_or(
        "ignored",
        "rlvr's KL term is not weighted by the importance ratio (TRL's false): the KL "
        "gradient differs from TRL's default when beta > 0",
        False,
    ),
    "use_liger_kernel": _inert_or(
        "ignored", "rlvr computes the head's log-probabilities with its own chunked kernel", False
    ),
    "liger_kernel_config": _inert_or("ignored", "as use_liger_kernel", None),
    "use_transformers_continuous_batching": _inert_or(
        "ignored",
        "the hf backend batches with generate(); backend.name: vllm for throughput",
        False,
    ),
    "use_transformers_paged": _inert_or(
        "ignored", "as use_transformers_continuous_batching", False
    ),
    "transformers_continuous_batching_config": _inert_or(
        "ignored", "as use_transformers_continuous_batching", None
    ),
    "run_name": _inert_or(
        "ignored",
        "rlvr names the wandb run after training.output_dir's folder: choose the name there",
        None,
    ),
    "project": _inert_or(
        "ignored", "the wandb project comes from WANDB_PROJECT (default rlvr)", "huggingface"
    ),
    "log_completions": _inert_or(
        "ignored", "rlvr writes samples to samples.jsonl every training.log_samples_steps", False
    ),
    "use_cpu": _inert_or(
        "ignored", "rlvr uses CUDA where it is; hide GPUs with CUDA_VISIBLE_DEVICES=", False
    ),
    "gradient_checkpointing_kwargs": _inert_or(
        "ignored", "rlvr checkpoints with its own settings", None
    ),
    "torch_empty_cache_steps": _inert_or("ignored", "rlvr manages the CUDA cache itself", None),
    "label_smoothing_factor": _inert_or("ignored", "not used by GRPO (TRL ignores it too)", 0.0),
    "average_tokens_across_devices": _inert_or(
        "ignored", "rlvr normalises the loss as algorithm.params.loss_type says", True
    ),
    "disable_tqdm": _inert_or(
        "ignored", "rlvr shows its progress bar only where stderr is a terminal", None
    ),
    "data_seed": _inert_or("ignored", "the prompt order derives from training.seed", None),
    "full_determinism": _inert_or(
        "ignored", "rlvr seeds every step's sampling from training.seed", False
    ),
    "ignore_data_skip": _inert_or(
        "ignored", "rlvr resumes mid-epoch at the next prompt, without skipping", False
    ),
    "train_sampling_strategy": _inert_or(
        "ignored", "GRPO samples with shuffle_dataset (TRL ignores this key too)", "random"
    ),
    "eval_delay": _inert_or("ignored", "rlvr evaluates at eval_on_start and every eval_steps", 0),
    "load_best_model_at_end": _inert_or(
        "ignored",
        "each eval is in metrics.jsonl: pick the checkpoint and load it (rlvr eval --checkpoint)",
        False,
    ),
    "save_only_model": _inert_or(
        "ignored", "rlvr saves the optimizer state too: --resume needs it", False
    ),
    "enable_jit_checkpoint": _inert_or(
        "ignored", "rlvr saves on Ctrl-C/SIGTERM and at training.max_minutes itself", False
    ),
    "restore_callback_states_from_checkpoint": _inert_or(
        "ignored", "rlvr has no trainer callbacks; --resume restores the whole run state", False
    ),
    "ddp_timeout": _inert_or("ignored", "set RLVR_DIST_TIMEOUT (seconds) instead", 1800),
    "fsdp_config": _inert_or(
        "ignored", "rlvr's FSDP2 shards per decoder layer, with training.fsdp_cpu_offload", None
    ),
    "local_rank": _inert_or("ignored", "set by torchrun", -1),
    **_group(
        "ignored",
        _HUB,
        push_to_hub=False,
        hub_always_push=False,
        hub_token=None,
        hub_private_repo=None,
        hub_model_id=None,
        hub_revision=None,
        hub_strategy="every_save",
        log_completions_hub_repo=None,
    ),
    **_group(
        "ignored",
        _EVAL,
        prediction_loss_only=False,
        eval_use_gather_object=False,
        batch_eval_metrics=False,
        bf16_full_eval=False,
        fp16_full_eval=False,
        eval_do_concat_batches=True,
        eval_accumulation_steps=None,
        metric_for_best_model=None,
        greater_is_better=None,
        include_for_metrics=[],
    ),
    **_group(
        "ignored",
        _LOADER,
        dataloader_drop_last=False,
        dataloader_persistent_workers=False,
        dataloader_pin_memory=True,
        dataloader_in_order=True,
        dataloader_num_workers=0,
        dataloader_prefetch_factor=None,
        dataloader_multiprocessing_context=None,
    ),
    **_group(
        "ignored",
        _DDP,
        ddp_find_unused_parameters=None,
        ddp_bucket_cap_mb=None,
        ddp_broadcast_buffers=None,
        ddp_static_graph=None,
        ddp_backend=None,
        accelerator_config=None,
    ),
    **_group(
        "ignored",
        _VLLM_SERVER,
        vllm_server_base_url=None,
        vllm_server_host="0.0.0.0",
        vllm_server_port=8000,
        vllm_server_timeout=240.0,
        vllm_group_port=51216,
    ),
    **_group(
        "ignored",
        _COMPILE,
        torch_compile=False,
        torch_compile_backend=None,
        torch_compile_mode=None,
    ),
    **_group(
        "ignored",
        "only with loss_type sapo or vespo, which rlvr does not have",
        sapo_temperature_neg=1.05,
        sapo_temperature_pos=1.0,
        vespo_k_pos=2.0,
        vespo_lambda_pos=3.0,
        vespo_k_neg=3.0,
        vespo_lambda_neg=2.0,
    ),
    **_group(
        "ignored",
        "only with sync_ref_model, which rlvr does not have",
        ref_model_mixup_alpha=0.6,
        ref_model_sync_steps=512,
    ),
    **_group(
        "ignored",
        "only with use_adaptive_entropy, which rlvr does not have",
        entropy_coef_min=0.0,
        entropy_coef_max=1.0,
        entropy_coef_delta=0.005,
        entropy_target=0.2,
    ),
    **_group(
        "ignored",
        _LOG,
        logging_first_step=False,
        log_on_each_node=True,
        logging_nan_inf_filter=True,
        log_level="passive",
        log_level_replica="warning",
        include_num_input_tokens_seen="no",
        log_multimodal=True,
        num_completions_to_print=None,
        log_unique_prompts=False,
        skip_memory_metrics=True,
        debug="",
    ),
    **_group(
        "ignored",
        "rlvr's trackio logger takes its Space as callbacks: [{name: trackio, params: "
        "{space_id: ...}}] (report_to: trackio logs locally)",
        trackio_space_id=None,
        trackio_bucket_id=None,
        trackio_static_space_id=None,
    ),
    **_group(
        "ignored",
        "rewards read the dataset's columns by name; there are no labels",
        label_names=None,
        length_column_name="length",
    ),
    **_group("ignored", "rank 0 alone saves checkpoints", save_on_each_node=False),
    **_group(
        "ignored",
        "rlvr train and rlvr eval are separate commands",
        do_train=False,
        do_eval=False,
        do_predict=False,
    ),
    **_group(
        "ignored",
        "the training forward needs no KV cache; generation's is backend.params.use_cache (hf)",
        use_cache=False,
    ),
    # ---- keys of older TRL versions (OLDER_TRL_KEYS)
    "max_prompt_length": _mapped("same meaning (TRL before 1.0; rlvr left-truncates)"),
    "warmup_ratio": _mapped("same meaning (transformers before 5)"),
    "use_liger_loss": _inert_or(
        "ignored", "rlvr computes the head's log-probabilities with its own chunked kernel", False
    ),
    "logging_dir": _inert_or("ignored", "logs go to training.output_dir", None),
    "overwrite_output_dir": _inert_or(
        "ignored", "rlvr never deletes a run; use a new output_dir", False
    ),
}

#: Keys of TRL versions before 1.16 (or of transformers before 5) that the table also decides.
OLDER_TRL_KEYS = frozenset(
    {"max_prompt_length", "warmup_ratio", "use_liger_loss", "logging_dir", "overwrite_output_dir"}
)

#: The ignored keys and why (kept for ``tests/test_training_keys.py`` and callers).
TRL_IGNORED = {k: e.reason for k, e in TRL_KEYS.items() if e.kind == "ignored" and e.apply is None}
#: The keys that are algorithm params in rlvr.
TRL_ALGORITHM_KEYS = tuple(
    k for k, e in TRL_KEYS.items() if e.target.startswith("algorithm.params.")
)


# --------------------------------------------------------------------------- translation


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
        paste = _Paste(data, host, "training", values, require, defaults, overridden)
        _translate(paste)
        problems += paste.problems
        markers = [k for k in values if k not in native]
        problems += _looks_pasted(data, markers)
    block = data.pop(TRL_SECTION, None)
    if block is not None and not isinstance(block, dict):
        problems.append((TRL_SECTION, "must be a mapping of TRL GRPOConfig keys"))
    elif block:
        paste = _Paste(data, host, TRL_SECTION, block, require, defaults, overridden)
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


def _translate(paste: _Paste) -> None:
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
    g = training.get("num_generations", _TRL_DEFAULTS["num_generations"])
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


def _reward_weights(block: str, weights: Any) -> list[tuple[str, str]]:
    """TRL's ``reward_weights`` list is each ``rewards[]`` entry's ``weight`` in rlvr: a problem
    that spells out the entries to write (dropped silently, the weights would be lost)."""
    if weights is None:
        return []
    if isinstance(weights, list) and weights:
        spelled = ", ".join(f"rewards[{i}].weight: {w}" for i, w in enumerate(weights))
        fix = f"set {spelled}"
    else:
        fix = "set each entry's weight"
    return [(f"{block}.reward_weights", f"rlvr weighs each rewards[] entry on its own: {fix}")]


# --------------------------------------------------------------------------- docs


def trl_keys_markdown() -> str:
    """:data:`TRL_KEYS` as a markdown table (key, decision, rlvr, how or why), grouped by
    decision, for the docs."""
    order = {"mapped": 0, "moved": 1, "error": 2, "ignored": 3}
    lines = ["| GRPOConfig key | decision | rlvr | how or why |", "|---|---|---|---|"]
    for key, entry in sorted(TRL_KEYS.items(), key=lambda kv: (order[kv[1].kind], kv[0])):
        target = entry.target or (f"training.{key}" if entry.kind == "mapped" else "")
        why = entry.reason
        if entry.inert and entry.kind in ("ignored", "error"):
            shown = " or ".join("null" if v is None else json.dumps(v) for v in entry.inert)
            why += f" (accepted silently: {shown})"
        older = " (older TRL)" if key in OLDER_TRL_KEYS else ""
        cells = [f"`{key}`{older}", entry.kind, f"`{target}`" if target else "", why]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


__all__ = [
    "OLDER_TRL_KEYS",
    "TRL_ALGORITHM_KEYS",
    "TRL_IGNORED",
    "TRL_KEYS",
    "TRL_SECTION",
    "TRL_VERSION",
    "TrlKey",
    "move_trl_keys",
    "trl_keys_markdown",
]
