"""Validate a config dict as a whole: defaults, TRL keys, unknown sections and plugin names,
the typed sections, each plugin's params, then the cross-checks; all problems at once."""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rlvr.api.errors import ConfigWarning
from rlvr.api.host import PluginHost
from rlvr.api.registration import Params
from rlvr.compat.trl.translate import TRL_KEYS, move_trl_keys
from rlvr.config.checks import cross_check, learning_warnings
from rlvr.config.plugin_params import (
    data_source_params,
    entries,
    raw_entries,
    validate_params,
)
from rlvr.config.problems import ConfigError, pydantic_problems, sort_problems
from rlvr.config.run_config import (
    DEFAULT_ALGORITHM,
    DEFAULT_BACKEND,
    DEFAULT_ENVIRONMENT,
    SECTIONS,
    RunConfig,
)
from rlvr.config.sections import TrainingConfig


def validate(
    data: dict[str, Any],
    host: PluginHost,
    *,
    require: tuple[str, ...] = (),
    config_dir: Path | None = None,
    set_keys: Sequence[str] = (),
    training: bool = True,
) -> RunConfig:
    """Validate a config dict against the registry; cross-checks run when the schema passes,
    and with ``training`` the warnings of :func:`learning_warnings`.

    Plugin params validators find ``config_dir`` in their validation context
    (``info.context["config_dir"]``) to resolve relative paths: the config file's directory,
    or the current directory for an entry whose params were given with ``--set``
    (``set_keys``) or a config that came from no file."""
    data = dict(data)
    if "training" in data and data["training"] is None:  # `training:` with every key commented out
        data["training"] = {}
    if isinstance(data.get("callbacks"), list):  # `callbacks: [my_logger]`: a name alone
        data["callbacks"] = [{"name": e} if isinstance(e, str) else e for e in data["callbacks"]]
    # Before the defaults: a TRL key may name the backend (use_vllm) or land in the defaulted
    # algorithm's params.
    defaults = {
        "algorithm": DEFAULT_ALGORITHM,
        "backend": DEFAULT_BACKEND,
        "environment": DEFAULT_ENVIRONMENT,
    }
    native = frozenset(TrainingConfig.model_fields)
    given = frozenset(set_keys)  # a --set wins over a TRL block's value for the same key
    moved = move_trl_keys(
        data, host, require=require, defaults=defaults, native=native, overridden=given
    )
    data = _with_defaults(data, require, host)
    moved += _environment_data(data, host)
    env = _environment_params(data, host)
    if env is not None and env[0].rewards(env[1]):  # the environment scores its episodes
        require = tuple(s for s in require if s != "rewards")
    problems = _missing_sections(data, require) + _unknown_names(data, host) + moved
    config = None
    try:
        config = RunConfig.model_validate(data)
    except ValidationError as exc:
        known = {p for p, _ in problems}
        also = {"training": list(TRL_KEYS)}  # a near miss of a TRL key: that key
        found = pydantic_problems(exc, "", RunConfig, also=also)
        problems += [p for p in found if p[0] not in known]
    params, found = validate_params(data, host, config_dir, set_keys)
    problems += found
    if config is not None:
        problems += data_source_params(config, host, config_dir, set_keys)
    if problems or config is None:
        raise ConfigError(sort_problems(problems, SECTIONS))
    for entry, value in zip(entries(config), params, strict=True):
        entry.params = value
    problems = cross_check(config, host)
    if problems:
        raise ConfigError(problems)
    if training:
        for message in learning_warnings(config, host):
            warnings.warn(message, ConfigWarning, stacklevel=2)
    return config


def _with_defaults(
    data: dict[str, Any], require: tuple[str, ...], host: PluginHost
) -> dict[str, Any]:
    data = dict(data)
    for section, default in (("algorithm", DEFAULT_ALGORITHM), ("backend", DEFAULT_BACKEND)):
        if section in require and data.get(section) is None:
            data[section] = {"name": default}
    # The environment needs no ``require``: a command that builds plugins (train, validate)
    # requires the algorithm, and every such run has an environment. Without the built-in
    # single_turn (plugins disabled) it stays None, which means the same.
    known = DEFAULT_ENVIRONMENT in host.environments
    if "algorithm" in require and data.get("environment") is None and known:
        data["environment"] = {"name": DEFAULT_ENVIRONMENT}
    return data


def _environment_params(data: dict[str, Any], host: PluginHost) -> tuple[Any, Params] | None:
    """The environment entry's record and validated params, before the whole config is
    validated (None when there is no such entry or its params are invalid: those problems
    are reported with the entry)."""
    entry = data.get("environment")
    if not isinstance(entry, dict) or str(entry.get("name")) not in host.environments:
        return None
    record = host.environments[str(entry.get("name"))]
    try:
        params = record.params.model_validate(
            entry.get("params") or {}, context={"config_dir": Path.cwd()}
        )
    except ValidationError:
        return None
    return record, params


def _environment_data(data: dict[str, Any], host: PluginHost) -> list[tuple[str, str]]:
    """Merge the ``data:`` keys an environment provides (``Environment.data``: it is its own
    task source) into ``data`` (in place), under the user's other ``data:`` keys. A key the
    user set to something else is a problem: the rows would have two sources."""
    env = _environment_params(data, host)
    if env is None:
        return []
    record, params = env
    provided = record.data(params)
    section = data.get("data") or {}
    if not provided or not isinstance(section, dict):
        return []
    clash = [k for k in ("source", "path", "eval_path") if section.get(k) is not None]
    clash += [k for k in provided if section.get(k) not in (None, provided[k])]
    if clash:
        return [
            (
                f"data.{clash[0]}",
                f"environment {record.name!r} provides the rows (data.{', data.'.join(provided)} "
                f"from its params); remove data.{clash[0]}",
            )
        ]
    data["data"] = {**section, **provided}
    if record.multi_turn and section.get("chat_template") is None:
        data["data"]["chat_template"] = True  # what its episodes render with anyway
    return []


def _missing_sections(data: dict[str, Any], require: tuple[str, ...]) -> list[tuple[str, str]]:
    problems = []
    for section in require:
        if data.get(section) in (None, [], {}):
            problems.append((section, f"this command needs a `{section}:` section"))
    node = data.get("data")
    if (
        "data" in require
        and isinstance(node, dict)
        and node
        and node.get("path") is None
        and node.get("reasoning_gym") is None
        and node.get("source") is None
    ):
        problems.append(
            (
                "data.path",
                "required field is missing: a .json/.jsonl/.parquet file, a directory of them or "
                "a hub dataset name (or data.reasoning_gym: a generated task, or data.source: a "
                "data source plugin)",
            )
        )
    for key in data:
        if key not in SECTIONS:
            hint = difflib.get_close_matches(key, SECTIONS, n=1)
            msg = f"unknown section {key!r}"
            msg += f"; did you mean {hint[0]!r}?" if hint else ""
            known = ", ".join(SECTIONS)
            problems.append((key, msg + f" -- sections: {known}, trl (a pasted TRL GRPOConfig)"))
    return problems


def _unknown_names(data: dict[str, Any], host: PluginHost) -> list[tuple[str, str]]:
    """Plugin names that are not registered, with did-you-mean and failed plugins."""
    problems: list[tuple[str, str]] = []
    rewards = data.get("rewards")
    if rewards is not None and not isinstance(rewards, list):
        return [("rewards", "must be a list of {name, weight, params} entries")]
    callbacks = data.get("callbacks")
    if callbacks is not None and not isinstance(callbacks, list):
        return [("callbacks", "must be a list of callback names or {name, params} entries")]
    problems += _unknown_loggers(data, host)
    for kind, path, entry in raw_entries(data):
        if not isinstance(entry, dict):
            problems.append((path, f"must be a mapping with a `name` (got {entry!r})"))
        elif "name" not in entry:
            names = ", ".join(sorted(host.records[kind]))
            problems.append((f"{path}.name", f"missing; available {kind}s: {names}"))
        elif entry["name"] not in host.records[kind]:
            problems.append((f"{path}.name", host.unknown_message(kind, str(entry["name"]))))
    return problems


def _unknown_loggers(data: dict[str, Any], host: PluginHost) -> list[tuple[str, str]]:
    """``training.report_to`` names that are no registered callback (``none``, ``all`` aside)."""
    training = data.get("training")
    raw = training.get("report_to") if isinstance(training, dict) else None
    names = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    return [
        ("training.report_to", host.unknown_message("callback", name))
        for name in names
        if isinstance(name, str) and name not in ("none", "all") and name not in host.callbacks
    ]
