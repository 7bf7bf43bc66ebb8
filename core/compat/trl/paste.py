"""One block of TRL keys being translated: :class:`Paste`, and :class:`TrlKey`, the decision
for one key that :mod:`rlvr.compat.trl.keys` declares per key and whose ``apply`` works on a
:class:`Paste`. TRL's defaults that the translation reads live here too."""

from __future__ import annotations

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
    apply: Callable[[Paste, str, Any], None] | None = None


#: TRL's defaults of the keys the translation of another key reads.
READ_DEFAULTS = {
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


class Paste:
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
        return READ_DEFAULTS.get(key)

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


__all__ = ["READ_DEFAULTS", "TRL_DEFAULTS", "TRL_SECTION", "TRL_VERSION", "Kind", "Paste", "TrlKey"]
