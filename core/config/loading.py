"""Loading a config: the YAML or TOML file, ``--set`` overrides, relative paths, and the
opt-ins a config that runs code needs.

Relative paths (``model.name_or_path``, ``data.path``, ``data.eval_path``,
``training.output_dir``, and those in plugin params, such as ``callable``'s ``function``)
written in a config file resolve against that file's directory; paths given with ``--set``
against the current directory (param by param: a ``--set`` on one param of an entry leaves the
others where the file put them).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from rlvr.api.errors import RlvrError
from rlvr.api.host import PluginHost
from rlvr.config.problems import ConfigError, key_path, with_origins
from rlvr.config.run_config import RunConfig
from rlvr.config.validation import validate
from rlvr.config.yaml_text import YamlTextError, load_yaml


def read_file(path: str | Path) -> dict[str, Any]:
    """Parse a YAML or TOML config file into a dict (a clear error if it is not one)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError([("", f"config file {str(p.absolute())!r} does not exist")])
    text = p.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text) if p.suffix == ".toml" else load_yaml(text)
    except (YamlTextError, tomllib.TOMLDecodeError, ValueError) as exc:  # ValueError: a huge int
        msg = str(exc).replace('"<unicode string>"', p.name)  # yaml names no file of its own
        raise ConfigError([("", f"cannot parse {p.name}: {msg}")], source=str(p)) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([("", "the top level must be a mapping of sections")], source=str(p))
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``--set a.b.c=value`` overrides (values parsed as YAML; ``rewards[1].weight``
    and ``rewards.1.weight`` both address a list item)."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError([("--set", f"{item!r} is not KEY=VALUE (e.g. training.seed=1)")])
        key, raw = item.split("=", 1)
        parts = key.replace("[", ".").replace("]", "").strip(".").split(".")
        try:
            value = _parse_value(raw)
        except YamlTextError as exc:  # the first line: the rest points into the value
            shown = repr(raw) if len(raw) <= 60 else f"{raw[:40]!r}... ({len(raw):,} characters)"
            why = str(exc).splitlines()[0]
            raise ConfigError(
                [(key, f"cannot read the value {shown} (from --set): {why}")]
            ) from None
        node: Any = data
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                if not part.isdigit() or len(part) > 9 or int(part) >= len(node):
                    raise ConfigError(
                        [(key, f"no list item {part!r} (the list has {len(node)}) (from --set)")]
                    )
                if last:
                    node[int(part)] = value
                else:
                    node = node[int(part)]
            elif isinstance(node, dict):
                if last:
                    node[part] = value
                else:
                    node = node.setdefault(part, {})
                    if node is None:
                        node = data_set(data, parts[: i + 1], {})
            else:
                raise ConfigError(
                    [(key, f"{'.'.join(parts[:i])} is not a section or list (from --set)")]
                )
    return data


def _parse_value(raw: str) -> Any:
    """A ``--set`` value as YAML, plus what YAML 1.1 misses: ``1e-3`` is a float. A quoted
    value (``'x="1e3"'``) is a string, as in the file."""
    value = load_yaml(raw) if raw.strip() else ""
    if isinstance(value, str) and _plain_scalar(raw):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def _plain_scalar(raw: str) -> bool:
    """Whether ``raw`` is YAML written without quotes (or a block scalar's ``|``, ``>``)."""
    node = yaml.compose(raw, Loader=yaml.SafeLoader)
    return isinstance(node, yaml.ScalarNode) and node.style is None


def data_set(data: dict[str, Any], parts: list[str], value: Any) -> Any:
    node = data
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[parts[-1]] = value
    return value


# --------------------------------------------------------------------------- relative paths

_DATA_SUFFIXES = (".json", ".jsonl", ".parquet")


def _looks_local(value: str) -> bool:
    """A path rather than a hub id (``org/name``): starts with ``.``, ``/`` or ``~``, has more
    than one ``/``, or names a file by its suffix."""
    return (
        value.startswith((".", "/", "~"))
        or value.count("/") > 1
        or "\\" in value
        or value.endswith((".gguf", *_DATA_SUFFIXES))
    )


#: The config keys that hold paths, and whether a value may instead be a hub id.
PATH_KEYS = {
    ("model", "name_or_path"): True,
    ("data", "path"): True,
    ("data", "eval_path"): True,
    ("training", "output_dir"): False,
}


def resolve_paths(data: dict[str, Any], base: Path, only: Sequence[str] | None = None) -> None:
    """Make the relative paths of :data:`PATH_KEYS` absolute against ``base`` (in place).

    A value that may be a hub id stays as written unless it exists under ``base``, looks like
    a path (:func:`_looks_local`), or names an entry of a directory that exists under ``base``
    (``models/tiny-arithm`` beside a ``models/`` directory: a typo, not a hub id to wait on).
    ``only`` limits this to those dotted keys."""
    for (section, key), hub in PATH_KEYS.items():
        if only is not None and f"{section}.{key}" not in only:
            continue
        node = data.get(section)
        if not isinstance(node, dict):
            continue
        value = node.get(key)
        if not isinstance(value, str) or not value or Path(value).expanduser().is_absolute():
            continue
        candidate = base / value
        in_local_dir = "/" in value and candidate.parent.is_dir()
        if not hub or candidate.exists() or _looks_local(value) or in_local_dir:
            node[key] = os.path.normpath(candidate.absolute())


# --------------------------------------------------------------------------- the whole config


def load_config(
    source: str | Path | dict[str, Any],
    host: PluginHost,
    *,
    overrides: Sequence[str] = (),
    require: tuple[str, ...] = (),
    training: bool = True,
    allow_code: bool = False,
    trust_remote_code: bool = False,
    amend: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> RunConfig:
    """Read, override, validate and cross-check a config; raise :class:`ConfigError` with all
    problems. ``require`` names the sections the calling command needs; ``training=False``
    (evaluation, scoring, export) drops the warnings about settings that cannot learn: a greedy
    eval is what ``training.temperature: 0`` is for there. A config that would run code in
    those sections needs the user's opt-in (:func:`check_code_opt_ins`): ``allow_code`` for
    rewards that import code it names, ``trust_remote_code`` for ``model.trust_remote_code``.
    ``amend`` returns the config dict with what the caller adds (``rlvr.Trainer``: its reward
    functions), which the overrides can then address.

    Relative paths in a file resolve against its directory, those given in ``overrides``
    against the current directory (a dict ``source`` is taken as written)."""
    label = None if isinstance(source, dict) else str(source)
    data = dict(source) if isinstance(source, dict) else read_file(source)
    if label is not None:
        resolve_paths(data, Path(label).absolute().parent)
    if amend is not None:
        data = amend(data)
    data = apply_overrides(data, list(overrides))
    set_keys = {key_path(o.split("=", 1)[0]): o for o in overrides if "=" in o}
    if label is not None:
        resolve_paths(data, Path.cwd(), only=list(set_keys))
    keys = [key_path(o.split("=", 1)[0]) for o in overrides if "=" in o]
    config_dir = Path(label).absolute().parent if label is not None else None
    try:
        config = validate(
            data, host, require=require, config_dir=config_dir, set_keys=keys, training=training
        )
    except ConfigError as exc:
        raise ConfigError(with_origins(exc.problems, overrides), source=label) from None
    check_code_opt_ins(
        config,
        host,
        require or ("model", "rewards"),  # a caller that names no sections may use any
        allow_code=allow_code,
        trust_remote_code=trust_remote_code,
    )
    return config


# --------------------------------------------------------------------------- opt-ins

#: The command-line flags that let a config run code (``allow_code=`` and
#: ``trust_remote_code=`` in Python).
ALLOW_CODE_FLAG = "--allow-code"
TRUST_REMOTE_CODE_FLAG = "--trust-remote-code"


class CodeOptInError(RlvrError):
    """A config asks to run code that the command line did not allow."""


def check_code_opt_ins(
    config: RunConfig,
    host: PluginHost,
    sections: Sequence[str],
    *,
    allow_code: bool,
    trust_remote_code: bool,
) -> None:
    """Raise :class:`CodeOptInError` when ``config`` (in the ``sections`` a command uses) would
    run code that was not allowed: a reward entry whose record says it imports code named in
    its params (``callable``), or an environment entry whose record says so (a user's class
    given to an adapter, a function as a tool) where the command runs episodes, without
    ``allow_code``; ``model.trust_remote_code: true`` (the model directory's Python files),
    or a reward whose record says it runs a model's own
    files (``reward_model``'s ``trust_remote_code``), without ``trust_remote_code``. A config
    may come from anyone; only the person running the command can say that its code may run."""
    found = []
    if "rewards" in sections and not allow_code:
        for i, entry in enumerate(config.rewards):
            record = host.rewards.get(entry.name)
            code = record.runs_code(entry.params) if record is not None else None
            if code:
                label = f" {entry.label!r}" if entry.label else ""
                found.append(
                    f"rewards[{i}] ({entry.name}{label}) imports and runs {code!r}: pass "
                    f"{ALLOW_CODE_FLAG} to allow it (allow_code=True in Python)"
                )
    env = config.environment
    # The commands that run episodes: train and validate (algorithm), eval (data), env check
    # (environment); scoring and export build no environment.
    episodes = any(s in sections for s in ("algorithm", "data", "environment"))
    if episodes and env is not None and not allow_code:
        env_record = host.environments.get(env.name)
        code = env_record.runs_code(env.params) if env_record is not None else None
        if code:
            found.append(
                f"environment ({env.name}) imports and runs {code!r}: pass {ALLOW_CODE_FLAG} "
                "to allow it (allow_code=True in Python)"
            )
    if "rewards" in sections and not trust_remote_code:
        for i, entry in enumerate(config.rewards):
            record = host.rewards.get(entry.name)
            remote = record.remote_code(entry.params) if record is not None else None
            if remote:
                found.append(
                    f"rewards[{i}] ({entry.name}) sets trust_remote_code: true, which runs the "
                    f"Python files of the model {remote!r}: pass {TRUST_REMOTE_CODE_FLAG} to "
                    "allow it (trust_remote_code=True in Python)"
                )
    model = config.model
    wants = "model" in sections and model is not None and model.trust_remote_code
    if wants and not trust_remote_code:
        assert model is not None
        found.append(
            "model.trust_remote_code: true runs the Python files of the model "
            f"{model.name_or_path!r}: pass {TRUST_REMOTE_CODE_FLAG} to allow it "
            "(trust_remote_code=True in Python)"
        )
    if found:
        raise CodeOptInError(
            "; ".join(found) + ". A config alone never runs code: allow it only for a config "
            "(and model) you trust"
        )
