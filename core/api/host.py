"""The plugin host: finds plugins through the ``rlvr`` entry-point group and keeps their records.

Built-in plugins are found the same way as third-party ones (rlvr's own entry points), so
nothing built-in is special. A plugin that fails to import or registers badly is recorded in
:attr:`PluginHost.failures` and shown by ``rlvr plugins``; it does not take rlvr down unless
``RLVR_STRICT_PLUGINS=1`` (for CI). Environment variables:

- ``RLVR_PLUGINS``: comma-separated allow-list of third-party plugins (entry-point or
  distribution names); rlvr's built-ins always load unless disabled.
- ``RLVR_DISABLE_PLUGINS``: comma-separated plugins (entry-point or distribution names, or
  ``dist:entry`` for one entry point) not to load.
- ``RLVR_STRICT_PLUGINS=1``: any plugin failure is an error.
"""

from __future__ import annotations

import difflib
import importlib.metadata as md
import inspect
import os
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import pluggy
from pydantic import BaseModel

from rlvr.api import hookspecs
from rlvr.api.errors import RlvrError
from rlvr.api.registration import (
    FACTORY_ARGS,
    Algorithm,
    Backend,
    Callback,
    DataSource,
    Environment,
    Record,
    Reward,
)
from rlvr.api.runtime import (
    GROUP_REWARDS,
    AlgorithmImpl,
    EnvironmentImpl,
    Generator,
    missing_members,
)

KINDS: dict[str, type] = {
    "reward": Reward,
    "algorithm": Algorithm,
    "backend": Backend,
    "environment": Environment,
    "callback": Callback,
    "data_source": DataSource,
}
_HOOKS = {
    "reward": "rlvr_register_rewards",
    "algorithm": "rlvr_register_algorithms",
    "backend": "rlvr_register_backends",
    "environment": "rlvr_register_environments",
    "callback": "rlvr_register_callbacks",
    "data_source": "rlvr_register_data_sources",
}
BUILTIN_DIST = "rlvr"


class PluginError(RlvrError, RuntimeError):
    """A plugin could not be loaded or registered (fatal only in strict mode)."""


@dataclass
class PluginFailure:
    """A plugin that could not be used, with why."""

    plugin: str
    dist: str | None
    error: str

    def __str__(self) -> str:
        where = f"{self.plugin} (from {self.dist})" if self.dist else self.plugin
        return f"{where}: {self.error}"


@dataclass
class PluginInfo:
    """A loaded plugin and what it registered."""

    name: str
    dist: str | None
    version: str | None
    registered: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class PluginHost:
    """The loaded plugins and their records, by kind and name."""

    pm: pluggy.PluginManager
    records: dict[str, dict[str, Record]] = field(
        default_factory=lambda: {kind: {} for kind in KINDS}
    )
    plugins: list[PluginInfo] = field(default_factory=list)
    failures: list[PluginFailure] = field(default_factory=list)
    #: names claimed by more than one plugin, per kind: name -> the providers.
    conflicts: dict[str, dict[str, list[str]]] = field(
        default_factory=lambda: {kind: {} for kind in KINDS}
    )

    @property
    def rewards(self) -> dict[str, Reward]:
        return self.records["reward"]  # type: ignore[return-value]

    @property
    def algorithms(self) -> dict[str, Algorithm]:
        return self.records["algorithm"]  # type: ignore[return-value]

    @property
    def backends(self) -> dict[str, Backend]:
        return self.records["backend"]  # type: ignore[return-value]

    @property
    def environments(self) -> dict[str, Environment]:
        return self.records["environment"]  # type: ignore[return-value]

    @property
    def callbacks(self) -> dict[str, Callback]:
        return self.records["callback"]  # type: ignore[return-value]

    @property
    def data_sources(self) -> dict[str, DataSource]:
        return self.records["data_source"]  # type: ignore[return-value]

    def get(self, kind: str, name: str) -> Any:
        """The record of ``kind`` called ``name``, or a ``KeyError`` that explains why not."""
        try:
            return self.records[kind][name]
        except KeyError:
            raise KeyError(self.unknown_message(kind, name)) from None

    def unknown_message(self, kind: str, name: str) -> str:
        """Why ``name`` is not available, with a did-you-mean and the failed plugins."""
        what = kind.replace("_", " ")  # data_source: "unknown data source"
        if name in self.conflicts[kind]:
            both = " and ".join(self.conflicts[kind][name])
            return (
                f"{what} {name!r} is registered by more than one plugin ({both}); uninstall one, "
                "or disable one with RLVR_DISABLE_PLUGINS"
            )
        known = sorted(self.records[kind])
        msg = f"unknown {what} {name!r}"
        close = difflib.get_close_matches(name, known, n=1)
        msg += f"; did you mean {close[0]!r}?" if close else "."
        msg += f" Available: {', '.join(known) or 'none'}."
        if self.failures:
            msg += " Plugins that failed to load (run `rlvr plugins`): " + "; ".join(
                str(f) for f in self.failures
            )
        return msg

    def validate_hooks(self, config: Any) -> list[tuple[str, str]]:
        """Run every plugin's ``rlvr_validate_config`` hook and collect their problems."""
        problems: list[tuple[str, str]] = []
        for impl in self.pm.hook.rlvr_validate_config.get_hookimpls():
            try:
                found: Any = impl.function(config=config) or []
            except Exception as exc:  # a broken check must not hide the others
                found = [("", f"config check of plugin {impl.plugin_name!r} crashed: {exc!r}")]
            problems.extend((str(path), str(msg)) for path, msg in found)
        return problems

    # ------------------------------------------------------------------ registration

    def add_plugin(self, plugin: object, name: str, dist: str | None, version: str | None) -> None:
        """Register ``plugin`` (a module or object with hookimpls) and collect its records."""
        try:
            self.pm.register(plugin, name=name)
        except Exception as exc:
            self._fail(name, dist, f"could not be registered: {exc}")
            return
        info = PluginInfo(name=name, dist=dist, version=version)
        self.plugins.append(info)
        for kind, hook in _HOOKS.items():
            for impl in getattr(self.pm.hook, hook).get_hookimpls():
                if impl.plugin is plugin:
                    self._call_register(impl, kind, info)

    def _call_register(self, impl: pluggy.HookImpl, kind: str, info: PluginInfo) -> None:
        collected: list[Record] = []
        try:
            impl.function(register=collected.append)
        except Exception as exc:
            self._fail(info.name, info.dist, f"{impl.function.__name__} raised {_short(exc)}")
            return
        for record in collected:
            problem = check_record(record, KINDS[kind])
            if problem:
                self._fail(info.name, info.dist, problem)
                continue
            record = replace(record, dist=info.dist)
            self._store(kind, record, info)

    def _store(self, kind: str, record: Record, info: PluginInfo) -> None:
        provider = f"{info.dist or info.name}"
        table = self.records[kind]
        if record.name in self.conflicts[kind]:
            self.conflicts[kind][record.name].append(provider)
            return
        if record.name in table:
            first = table.pop(record.name).dist or "?"
            self.conflicts[kind][record.name] = [first, provider]
            self._fail(
                info.name,
                info.dist,
                f"{kind} name {record.name!r} is already registered by {first}; "
                f"both {first} and {provider} provide it, so neither is used",
            )
            return
        table[record.name] = record
        info.registered.append((kind, record.name))

    def _fail(self, plugin: str, dist: str | None, error: str) -> None:
        failure = PluginFailure(plugin=plugin, dist=dist, error=error)
        if _env_flag("RLVR_STRICT_PLUGINS"):
            raise PluginError(f"plugin {failure} (RLVR_STRICT_PLUGINS is set)")
        self.failures.append(failure)


# --------------------------------------------------------------------------- building plugins


def build_algorithm(record: Algorithm, params: Any, run: Any, requirements: Any) -> Any:
    """``record.factory(params, run)``, checked against :class:`rlvr.api.runtime.AlgorithmImpl`
    (``requirements`` is the record's ``requirements(params)``): a missing member is a
    :class:`PluginError` naming it, raised before any step runs."""
    impl = record.factory(params, run)
    problems = algorithm_problems(impl, requirements)
    _raise_missing("algorithm", record, impl, problems, "rlvr.api.runtime.AlgorithmImpl")
    return impl


def algorithm_problems(impl: Any, requirements: Any) -> list[str]:
    """What ``impl`` lacks of :class:`rlvr.api.runtime.AlgorithmImpl` (``build_value_model``
    only when ``requirements.value_model``)."""
    # ``inert`` is optional: without it the update skips no rows.
    skip = ("inert",) if requirements.value_model else ("inert", "build_value_model")
    problems = missing_members(impl, AlgorithmImpl, skip=skip)
    for name in ("num_iterations", "max_generation_rounds"):
        value = getattr(impl, name, 1)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            problems.append(f"{name} (must be an int >= 1, got {value!r})")
    return problems


def build_generator(record: Backend, params: Any, run: Any, model: Any, tokenizer: Any) -> Any:
    """``record.factory(params, run, model, tokenizer)``, checked against
    :class:`rlvr.api.runtime.Generator` like :func:`build_algorithm`."""
    gen = record.factory(params, run, model, tokenizer)
    problems = missing_members(gen, Generator)  # the conformance kit checks the same
    if problems and callable(getattr(gen, "close", None)):
        gen.close()
    _raise_missing("backend", record, gen, problems, "rlvr.api.runtime.Generator")
    return gen


def build_environment(record: Environment, params: Any, run: Any) -> Any:
    """``record.factory(params, run)``, checked against
    :class:`rlvr.api.runtime.EnvironmentImpl` like :func:`build_algorithm` (its methods must
    be coroutine functions: the episodes await them)."""
    env = record.factory(params, run)
    problems = missing_members(env, EnvironmentImpl)
    problems += [
        f"{name}() (must be async def)"
        for name in ("start", "respond", "close", GROUP_REWARDS)
        if callable(getattr(env, name, None))
        and not inspect.iscoroutinefunction(getattr(env, name))
    ]
    _raise_missing("environment", record, env, problems, "rlvr.api.runtime.EnvironmentImpl")
    return env


def _raise_missing(kind: str, record: Any, obj: Any, problems: list[str], protocol: str) -> None:
    if problems:
        where = f" (from {record.dist})" if record.dist else ""
        raise PluginError(
            f"{kind} {record.name!r}{where}: its factory built a {type(obj).__name__} that lacks "
            f"{', '.join(problems)}; the object must implement {protocol}"
        )


def create_host(*, entrypoints: bool = True, plugins: Iterable[object] = ()) -> PluginHost:
    """Build a fresh host: load the ``rlvr`` entry points (unless told not to), then ``plugins``.

    Built by a function, not at import time, so every test can get its own.
    """
    pm = pluggy.PluginManager("rlvr")
    pm.add_hookspecs(hookspecs)
    host = PluginHost(pm=pm)
    if entrypoints:
        _load_entrypoints(host)
    for i, plugin in enumerate(plugins):
        name = getattr(plugin, "__name__", None) or f"{type(plugin).__name__}-{i}"
        host.add_plugin(plugin, name=name, dist=None, version=None)
    return host


def _load_entrypoints(host: PluginHost) -> None:
    allow = _env_list("RLVR_PLUGINS")
    deny = _env_list("RLVR_DISABLE_PLUGINS") or set()
    seen: set[tuple[str | None, str]] = set()
    for ep in sorted(md.entry_points(group="rlvr"), key=_builtin_first):
        dist = ep.dist.name if ep.dist else None
        version = ep.dist.version if ep.dist else None
        if (dist, ep.name) in seen:  # the same distribution found twice on sys.path
            continue
        seen.add((dist, ep.name))
        names = {ep.name, f"{dist}:{ep.name}", dist}
        if names & deny:
            continue
        if allow is not None and dist != BUILTIN_DIST and not names & allow:
            continue
        label = ep.name if dist == BUILTIN_DIST else f"{dist}:{ep.name}"
        try:
            plugin = ep.load()
        except Exception as exc:
            host._fail(label, dist, f"failed to import {ep.value!r}: {_short(exc)}")
            continue
        host.add_plugin(plugin, name=label, dist=dist, version=version)


def _builtin_first(ep: md.EntryPoint) -> tuple[int, str]:
    dist = ep.dist.name if ep.dist else ""
    return (0 if dist == BUILTIN_DIST else 1, f"{dist}:{ep.name}")


def check_record(record: object, expected: type) -> str | None:
    """Why ``record`` is not a usable registration, or None."""
    if not isinstance(record, expected):
        return f"registered {record!r}, expected an rlvr.api.registration.{expected.__name__}"
    name = record.name  # type: ignore[attr-defined]
    if not isinstance(name, str) or not name.replace("_", "a").replace("-", "a").isalnum():
        return f"{expected.__name__.lower()} name {name!r} must be letters, digits, '_' or '-'"
    params = record.params  # type: ignore[attr-defined]
    if not (isinstance(params, type) and issubclass(params, BaseModel)):
        return f"{name!r}: params must be a pydantic model class, got {params!r}"
    if params.model_config.get("extra") != "forbid":
        return f"{name!r}: params model must reject unknown keys (subclass rlvr.plugin.Params)"
    factory = record.factory  # type: ignore[attr-defined]
    if not callable(factory):
        return f"{name!r}: factory is not callable"
    args = FACTORY_ARGS[expected]
    if not _accepts(factory, len(args)):
        return (
            f"{name!r}: factory must accept {len(args)} positional argument(s) "
            f"({', '.join(args)}), as rlvr calls it; its signature is {inspect.signature(factory)}"
        )
    return None


def _accepts(fn: Any, n: int) -> bool:
    """Whether ``fn`` can be called with ``n`` positional arguments (True when unknowable)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without a signature
        return True
    try:
        signature.bind(*range(n))
    except TypeError:
        return False
    return True


def _short(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return lines[-1].strip()


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _env_list(name: str) -> set[str] | None:
    raw = os.environ.get(name)
    if raw is None:
        return None if name == "RLVR_PLUGINS" else set()
    return {part.strip() for part in raw.split(",") if part.strip()}
