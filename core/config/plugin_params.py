"""Plugin entries: each entry's ``params`` validated against its plugin's params model, on its
own, so one entry's failure never hides another's and every problem carries its own path
(``rewards[1].params.tolerance``); and the JSON Schema where each entry is a union of the
installed plugins."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, ValidationError, create_model

from rlvr.api.host import PluginHost
from rlvr.api.registration import Params
from rlvr.config.problems import pydantic_problems
from rlvr.config.run_config import EnvironmentEntry, PluginEntry, RewardEntry, RunConfig
from rlvr.config.sections import DataConfig

# --------------------------------------------------------------------------- JSON schema


def _entry_model(kind: str, record: Any, base: type[BaseModel]) -> type[BaseModel]:
    return create_model(
        f"{kind.title()}_{record.name}",
        __base__=base,
        __doc__=record.description,
        name=(Literal[record.name], ...),  # type: ignore[arg-type]  # a Literal built at runtime
        params=(record.params, Field(default_factory=record.params)),
    )


def _union(kind: str, host: PluginHost, base: type[BaseModel]) -> Any:
    models = [_entry_model(kind, r, base) for r in host.records[kind].values()]
    if not models:
        return base
    if len(models) == 1:
        return models[0]
    return Annotated[Union[tuple(models)], Field(discriminator="name")]  # noqa: UP007


def _data_union(host: PluginHost) -> Any:
    """``data:`` as one of its spellings: a shorthand (``path``, ``reasoning_gym``), or each
    data source's ``{source: NAME, params: ...}``."""
    shorthand = create_model(
        "Data", __base__=DataConfig, params=(dict[str, Any], Field(default_factory=dict))
    )
    models = [
        create_model(
            f"Data_{r.name}",
            __base__=DataConfig,
            __doc__=r.description,
            source=(Literal[r.name], ...),  # type: ignore[arg-type]  # a Literal built at runtime
            params=(r.params, Field(default_factory=r.params)),
        )
        for r in host.data_sources.values()
    ]
    return Union[tuple([shorthand, *models])]  # noqa: UP007


def json_schema(host: PluginHost) -> dict[str, Any]:
    """The JSON Schema of a run config for the plugins ``host`` has loaded (for editors):
    :class:`RunConfig` with each plugin entry a union discriminated on ``name``."""
    # Types built at runtime: mypy cannot check them as annotations.
    reward: Any = _union("reward", host, RewardEntry)
    algorithm: Any = _union("algorithm", host, PluginEntry)
    backend: Any = _union("backend", host, PluginEntry)
    environment: Any = _union("environment", host, EnvironmentEntry)
    callback: Any = _union("callback", host, PluginEntry)
    data: Any = _data_union(host)
    model = create_model(
        "RunConfig",
        __base__=RunConfig,
        rewards=(list[reward], Field(default_factory=list)),
        callbacks=(list[callback], Field(default_factory=list)),
        algorithm=(algorithm | None, None),
        backend=(backend | None, None),
        environment=(environment | None, None),
        data=(data | None, None),
    )
    return model.model_json_schema()


# --------------------------------------------------------------------------- params


def entries(config: RunConfig) -> list[PluginEntry]:
    """The plugin entries of ``config``, in the order of :func:`raw_entries`."""
    plugins = (config.algorithm, config.backend, config.environment)
    return [*config.rewards, *(e for e in plugins if e is not None), *config.callbacks]


def raw_entries(data: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """``(kind, path, entry dict)`` of every plugin entry in ``data``."""
    rewards = data.get("rewards")
    out = [("reward", f"rewards[{i}]", e) for i, e in enumerate(rewards or [])]
    kinds = ("algorithm", "backend", "environment")
    out += [(k, k, data[k]) for k in kinds if data.get(k) is not None]
    callbacks = data.get("callbacks")
    out += [("callback", f"callbacks[{i}]", e) for i, e in enumerate(callbacks or [])]
    return out


def validate_params(
    data: dict[str, Any], host: PluginHost, config_dir: Path | None, set_keys: Sequence[str]
) -> tuple[list[Params], list]:
    """Each entry's params validated against its plugin's model; problems at their paths."""
    values: list[Params] = []
    problems: list[tuple[str, str]] = []
    if not isinstance(data.get("rewards", []), list) or not isinstance(
        data.get("callbacks", []), list
    ):
        return values, problems
    for kind, path, entry in raw_entries(data):
        record = host.records[kind].get(str(entry.get("name"))) if isinstance(entry, dict) else None
        if record is None:
            values.append(Params())
            continue  # reported by _unknown_names
        model: type[Params] = record.params
        raw = entry.get("params")
        if raw is None:
            need = [k for k, f in model.model_fields.items() if f.is_required()]
            if need:
                msg = f"required field is missing: this plugin needs {', '.join(need)}"
                problems.append((f"{path}.params", msg))
                values.append(Params())
                continue
            raw = {}
        if not isinstance(raw, dict):
            problems.append((f"{path}.params", f"must be a mapping of params (got {raw!r})"))
            values.append(Params())
            continue
        owner = functools.partial(_owner_hint, host, kind, record.name)
        value, found = _entry_params(
            model, raw, f"{path}.params", config_dir, _set_params(path, set_keys), owner
        )
        values.append(value)
        problems += found
    return values, problems


def data_source_params(
    config: RunConfig, host: PluginHost, config_dir: Path | None, set_keys: Sequence[str]
) -> list[tuple[str, str]]:
    """Validate ``data.params`` against the params model of the data source ``data.source``
    names and store them (the shorthands ``data.path`` and ``data.reasoning_gym`` are typed
    sections of their own, resolved when the rows load: :func:`rlvr.data.prompts.load_rows`)."""
    data = config.data
    if data is None or data.source is None:
        return []
    record = host.data_sources.get(data.source)
    if record is None:
        return [("data.source", host.unknown_message("data_source", data.source))]
    raw: Any = data.params
    if isinstance(raw, Params):  # not given: the default
        raw = raw.model_dump()
    if not isinstance(raw, dict):
        return [("data.params", f"must be a mapping of params (got {raw!r})")]
    owner = functools.partial(_owner_hint, host, "data_source", record.name)
    value, problems = _entry_params(
        record.params, raw, "data.params", config_dir, _set_params("data", set_keys), owner
    )
    if not problems:
        data.params = value
    return problems


def _set_params(path: str, set_keys: Sequence[str]) -> set[str] | None:
    """The params of entry ``path`` given with ``--set`` (top-level names); None when the whole
    entry or its whole ``params`` was."""
    fields: set[str] = set()
    for key in set_keys:
        if key in (path, f"{path}.params"):
            return None
        if key.startswith(f"{path}.params."):
            fields.add(re.split(r"[.\[]", key.removeprefix(f"{path}.params."), maxsplit=1)[0])
    return fields


def _entry_params(
    model: type[Params],
    raw: dict[str, Any],
    prefix: str,
    config_dir: Path | None,
    set_fields: set[str] | None,
    owner: Any,
) -> tuple[Params, list[tuple[str, str]]]:
    """One entry's params, validated with the directory each relative path in them resolves
    against (the validation context's ``config_dir``): the config file's for the params
    written there, the current one for those given with ``--set`` (``set_fields``; None: all
    of them). Params from both places are validated twice, once per directory, and each
    field is taken from the validation of its own."""
    cwd = Path.cwd()
    file_dir = cwd if config_dir is None or set_fields is None else config_dir
    mixed = bool(set_fields) and file_dir != cwd
    bases = [file_dir, cwd] if mixed else [file_dir]
    out: list[Params] = []
    problems: list[tuple[str, str]] = []
    for base in bases:
        try:
            out.append(model.model_validate(raw, context={"config_dir": base}))
        except ValidationError as exc:
            for path, msg in pydantic_problems(exc, prefix, model, owner):
                field = re.split(r"[.\[]", path.removeprefix(f"{prefix}."), maxsplit=1)[0]
                ours = path != prefix and field in (set_fields or ())
                if not mixed or ours == (base == cwd) or (path == prefix and base == file_dir):
                    problems.append((path, msg))
    if problems:
        return Params(), problems
    if not mixed:
        return out[0], []
    from_file, from_set = out
    chosen = {
        name: getattr(from_set if name in (set_fields or ()) else from_file, name)
        for name in model.model_fields
    }
    return model.model_construct(from_file.model_fields_set, **chosen), []


def _owner_hint(host: PluginHost, kind: str, name: str, key: str) -> str | None:
    """Which other plugins of the same kind have ``key`` (``dynamic_sampling`` under grpo),
    since the fix is then the plugin's name rather than the key."""
    owners = [
        n for n, r in host.records[kind].items() if n != name and key in r.params.model_fields
    ]
    if not owners:
        return None
    names = " and ".join(owners)
    if kind == "reward":
        return f"it is a param of the {names} reward{'s' if len(owners) > 1 else ''}"
    return f"it is a param of {names} (set {kind}.name: {owners[0]})"
