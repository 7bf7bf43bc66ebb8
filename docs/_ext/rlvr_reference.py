"""The reference pages that are generated from the code when the docs build.

The config keys come from the pydantic models of :mod:`rlvr.config.schema`, the plugins' params
from the records the plugin host loads (built-in plugins register through entry points, so this
is what ``rlvr plugins`` sees), the command line from :func:`rlvr.cli.parser.build_parser`, the
public API from ``rlvr.__all__``. Nothing here is copied by hand, so the pages follow the code.

Every function that collects or renders is plain Python (no Sphinx), so ``tests/test_docs.py``
calls them directly. :func:`setup` is the Sphinx side: a page holds a marker line such as
``<!-- rlvr-reference: config -->``, and the ``source-read`` event replaces it with the
generated Markdown before MyST parses the page (real headings, real tables, real anchors).
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

import yaml
from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import AliasChoices, BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from rlvr.api.host import KINDS, create_host
from rlvr.api.registration import Params
from rlvr.cli.parser import build_parser
from rlvr.compat.trl.keys import trl_keys_markdown
from rlvr.config.schema import SECTIONS, RunConfig

# --------------------------------------------------------------------------- model fields


@dataclass(frozen=True)
class Row:
    """One key of a pydantic model, as a reference table shows it."""

    key: str  # dotted path below the table's prefix: ``r``, ``close[].rel_tol``
    type: str
    default: str
    description: str
    nested: str = ""  # the path of the table with this key's own keys (``model.lora``), if any


@dataclass(frozen=True)
class Table:
    """The keys of one model (a config section, or a plugin's params)."""

    path: str  # ``training``, ``model.lora``, ``rewards[]``
    doc: str
    rows: tuple[Row, ...]


def nested_models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (``LoraConfig | None``, ``list[RewardEntry]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in nested_models(arg)]


def is_sequence(annotation: Any) -> bool:
    """Whether an annotation is a list or tuple (its items get ``[]`` in a key path)."""
    origin = get_origin(annotation)
    if origin in (list, tuple):
        return True
    return any(is_sequence(a) for a in get_args(annotation) if get_origin(annotation) is not None)


def type_label(annotation: Any) -> str:
    """A short, YAML-minded name of a field's type: ``int``, ``'auto' | 'float32'``,
    ``list[str] | null``, ``mapping`` for a nested model."""
    if annotation is type(None) or annotation is None:
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_label(a) for a in args)
    if origin is typing.Annotated:
        return type_label(args[0])
    if origin in (list, tuple):
        items = [a for a in args if a is not Ellipsis]
        inner = " | ".join(type_label(a) for a in items) if items else "any"
        return f"list[{inner}]"
    if origin is dict:
        return "mapping"
    if annotation is typing.Any:
        return "any"
    if isinstance(annotation, type):
        return {"str": "str", "int": "int", "float": "float", "bool": "bool"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation).replace("typing.", "")


def constraints(info: FieldInfo) -> str:
    """The numeric and length bounds of a field (``>= 1``, ``> 0, <= 1``)."""
    out = []
    for meta in info.metadata:
        if isinstance(meta, Ge):
            out.append(f">= {meta.ge}")
        elif isinstance(meta, Gt):
            out.append(f"> {meta.gt}")
        elif isinstance(meta, Le):
            out.append(f"<= {meta.le}")
        elif isinstance(meta, Lt):
            out.append(f"< {meta.lt}")
        elif isinstance(meta, MinLen):
            out.append(f"length >= {meta.min_length}")
        elif isinstance(meta, MaxLen):
            out.append(f"length <= {meta.max_length}")
    return ", ".join(out)


def yaml_value(value: Any) -> str:
    """A value as it would be written in the YAML config (``null``, ``true``, ``[]``)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    elif isinstance(value, tuple):
        value = list(value)
    text = yaml.safe_dump([value], default_flow_style=True, width=10_000, sort_keys=False)
    return text.strip()[1:-1]


def default_label(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel) and value.model_fields_set == set():
            return "(the defaults below)" if type(value).model_fields else "{}"
        return yaml_value(value)
    if info.default is PydanticUndefined:
        return "required"
    return yaml_value(info.default)


def aliases(name: str, info: FieldInfo) -> list[str]:
    """Other names a field accepts (``dual_clip`` for ``delta``)."""
    alias = info.validation_alias
    names: list[str] = []
    if isinstance(alias, AliasChoices):
        names = [c for c in alias.choices if isinstance(c, str)]
    elif isinstance(alias, str):
        names = [alias]
    if isinstance(info.alias, str):
        names.append(info.alias)
    return [n for n in dict.fromkeys(names) if n != name]


def walk_fields(
    model: type[BaseModel], path: str = "", *, expand: Callable[[type], bool] | None = None
) -> Iterator[tuple[str, type[BaseModel], str, FieldInfo, str]]:
    """``(owner path, owner model, field name, field, nested path)`` for every field of
    ``model`` (under ``path``), then for every field of the models nested in it, depth first.
    The nested path is where a field's own model is listed (``model.lora``, ``close[]``), or
    "" for a plain field.

    ``expand(model)`` says whether a nested model's fields are listed (default: any model with
    fields; the config leaves a plugin's params to the plugin reference)."""
    expand = expand or (lambda m: bool(m.model_fields))
    later = []
    for name, info in model.model_fields.items():
        nested = [m for m in nested_models(info.annotation) if expand(m)]
        sub = _join(path, f"{name}[]" if is_sequence(info.annotation) else name)
        yield path, model, name, info, sub if nested else ""
        later += [(m, sub) for m in nested]
    for sub_model, sub in later:
        yield from walk_fields(sub_model, sub, expand=expand)


def first_paragraph(doc: str | None) -> str:
    if not doc:
        return ""
    text = inspect.cleandoc(doc).split("\n\n")[0]
    return " ".join(text.split())


def describe(name: str, info: FieldInfo) -> str:
    parts = [info.description or ""]
    other = aliases(name, info)
    if other:
        parts.append("Also accepted as " + ", ".join(f"`{a}`" for a in other) + ".")
    return " ".join(p for p in parts if p).strip()


def model_tables(
    model: type[BaseModel], path: str, *, expand: Callable[[type], bool] | None = None
) -> list[Table]:
    """``model`` and every model nested in it, one table each: ``path``'s own keys first,
    then a table per nested model (``model.lora``), each row keyed relative to its table."""
    tables: dict[str, tuple[type[BaseModel], list[Row]]] = {path: (model, [])}
    for owner, owner_model, name, info, nested in walk_fields(model, path, expand=expand):
        kind = type_label(info.annotation)
        bounds = constraints(info)
        row = Row(
            key=name,
            type=f"{kind}, {bounds}" if bounds else kind,
            default=default_label(info),
            description=describe(name, info),
            nested=nested,
        )
        tables.setdefault(owner, (owner_model, []))[1].append(row)
    return [
        Table(path=p, doc=first_paragraph(m.__doc__), rows=tuple(rows))
        for p, (m, rows) in tables.items()
    ]


def _join(path: str, key: str) -> str:
    """``key`` below ``path`` (either may be empty)."""
    return f"{path}.{key}" if path and key else path or key


def keys_of(tables: list[Table]) -> set[str]:
    """Every full dotted key of ``tables`` (``training.guidance.field``, ``rewards[].weight``)."""
    return {_join(t.path, r.key) for t in tables for r in t.rows}


# --------------------------------------------------------------------------- the run config


def config_tables() -> list[Table]:
    """Every key the run config accepts, one table per section and nested model.

    A plugin entry's ``params`` is one key here: its fields depend on the plugin and are on the
    plugin reference (:func:`plugin_docs`)."""

    def expand(model: type) -> bool:
        return not issubclass(model, Params) and bool(model.model_fields)

    tables = []
    for section in SECTIONS:
        info = RunConfig.model_fields[section]
        (model,) = nested_models(info.annotation)
        path = f"{section}[]" if is_sequence(info.annotation) else section
        tables += model_tables(model, path, expand=expand)
    return tables


def section_rows() -> list[Row]:
    """The top level of the config: its seven sections."""

    return [
        Row(
            key=name,
            type=type_label(info.annotation).replace("list[mapping]", "list of mappings"),
            default=default_label(info),
            description=describe(name, info),
            nested=f"{name}[]" if is_sequence(info.annotation) else name,
        )
        for name, info in RunConfig.model_fields.items()
    ]


# --------------------------------------------------------------------------- plugins


@dataclass(frozen=True)
class PluginDoc:
    kind: str
    name: str
    description: str
    dist: str | None
    params_model: str
    tables: tuple[Table, ...]


def plugin_docs(
    host: Any | None = None, *, dists: tuple[str, ...] | None = ("rlvr",)
) -> list[PluginDoc]:
    """Each plugin the host loaded (by default rlvr's own: ``dists``), with its params tables.

    The host is a fresh :func:`rlvr.api.host.create_host` unless one is given; plugins are
    listed by kind (reward, algorithm, backend, environment) in the order they registered."""

    host = host or create_host()
    out = []
    for kind in KINDS:
        for name, record in host.records[kind].items():
            if dists is not None and record.dist not in dists:
                continue
            out.append(
                PluginDoc(
                    kind=kind,
                    name=name,
                    description=record.description,
                    dist=record.dist,
                    params_model=f"{record.params.__module__}.{record.params.__qualname__}",
                    tables=tuple(model_tables(record.params, "")),
                )
            )
    return out


# --------------------------------------------------------------------------- the command line


@dataclass(frozen=True)
class Option:
    names: str  # ``--set KEY=VALUE`` or ``config``
    required: bool
    default: str
    help: str


@dataclass(frozen=True)
class Command:
    path: str  # ``rlvr rewards score``
    help: str
    usage: str
    options: tuple[Option, ...]
    subcommands: tuple[str, ...] = field(default=())


def _option(action: argparse.Action) -> Option:
    metavar = action.metavar or (action.dest.upper() if action.option_strings else action.dest)
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    takes_value = action.nargs != 0
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        metavar = "{" + ",".join(map(str, action.choices)) + "}"
    if action.option_strings:
        names = ", ".join(action.option_strings)
        if takes_value:
            names += f" {metavar}"
    else:
        names = str(metavar)
    default = action.default
    shown = ""
    if takes_value and default not in (None, argparse.SUPPRESS, [], ""):
        shown = str(default)
    required = action.required or not action.option_strings
    help_text = (action.help or "").replace("%(prog)s", "rlvr")
    if isinstance(action, argparse._VersionAction):
        help_text = help_text or "print the version and exit"
    if isinstance(action, argparse._AppendAction):
        help_text += "" if "repeatable" in help_text else " (repeatable)"
    return Option(names=names, required=required, default=shown, help=help_text)


def cli_commands(parser: argparse.ArgumentParser | None = None) -> list[Command]:
    """Every command and subcommand of ``rlvr``, with its usage line and options."""
    if parser is None:
        parser = build_parser()
    out: list[Command] = []

    def walk(p: argparse.ArgumentParser, path: str, help_text: str) -> None:
        options = []
        subs: dict[str, tuple[argparse.ArgumentParser, str]] = {}
        for action in p._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                helps = {a.dest: a.help or "" for a in action._choices_actions}
                for name, sub in action.choices.items():
                    subs[name] = (sub, helps.get(name, ""))
                continue
            options.append(_option(action))
        usage = " ".join(p.format_usage().split())
        usage = usage.removeprefix("usage: ")
        out.append(
            Command(
                path=path,
                help=help_text or (p.description or ""),
                usage=usage,
                options=tuple(options),
                subcommands=tuple(f"{path} {n}" for n in subs),
            )
        )
        for name, (sub, sub_help) in subs.items():
            walk(sub, f"{path} {name}", sub_help)

    walk(parser, parser.prog, parser.description or "")
    return out


# --------------------------------------------------------------------------- the public API

#: The section of a tier's part of the API page for each internal module that defines its names.
API_GROUPS: dict[str, str] = {
    "rlvr.api.hookspecs": "Plugin hooks",
    "rlvr.api.registration": "What a plugin registers",
    "rlvr.api.runtime": "What factories receive and return at run time",
    "rlvr.algorithms.base": "The shared policy-gradient implementation",
    "rlvr.algorithms.params": "Algorithm params",
    "rlvr.rewards.extract": "Answers (for rewards)",
    "rlvr.rollout.tools": "Tool calling (for environments)",
    "rlvr.model.loading": "The policy model",
    "rlvr.model.logprobs": "The policy model",
    "rlvr.model.tiny": "The policy model",
    "rlvr.config.schema": "Config and runs",
    "rlvr.runs": "Config and runs",
    "rlvr.api.host": "Errors",
    "rlvr.outputs.metrics": "Outputs and scoring",
    "rlvr.rewards.scoring": "Outputs and scoring",
    "rlvr.api.errors": "Errors",
}

#: The tiers whose names the API page lists from ``__all__`` (the marker's name after ``api-``).
API_TIERS: dict[str, str] = {"scripts": "rlvr", "plugin": "rlvr.plugin"}


def api_names(tier: str = "rlvr") -> dict[str, list[tuple[str, str, str]]]:
    """``tier.__all__`` by section: ``{section: [(name, kind, defining module)]}``, where kind
    is ``class``, ``function`` or ``data``. ``__version__`` is left out."""

    module = importlib.import_module(tier)
    exports: dict[str, str] = dict(module._EXPORTS)
    exports["hookimpl"] = "rlvr.api.hookspecs"
    groups: dict[str, list[tuple[str, str, str]]] = {t: [] for t in API_GROUPS.values()}
    for name in module.__all__:
        if name == "__version__":
            continue
        source = exports.get(name, tier)
        obj = getattr(module, name)
        if inspect.isclass(obj):
            kind = "class"
        elif inspect.isfunction(obj):
            kind = "function"
        else:
            kind = "data"
        groups.setdefault(API_GROUPS.get(source, "Other"), []).append((name, kind, source))
    return {title: names for title, names in groups.items() if names}


def attr_doc(module: str, name: str) -> str:
    """The documentation of a module-level name, written as Sphinx reads it: ``#:`` comment
    lines right above its assignment, or a string literal right below it."""
    mod = importlib.import_module(module)
    source = inspect.getsource(mod)
    lines = source.splitlines()
    tree = ast.parse(source)
    for i, node in enumerate(tree.body):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if not any(isinstance(t, ast.Name) and t.id == name for t in targets):
            continue
        after = tree.body[i + 1] if i + 1 < len(tree.body) else None
        if (
            isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            return inspect.cleandoc(after.value.value)
        comment = []
        row = node.lineno - 2
        while row >= 0 and lines[row].lstrip().startswith("#:"):
            comment.insert(0, lines[row].lstrip()[2:].strip())
            row -= 1
        return " ".join(comment)
    return ""


def _data_value(obj: Any) -> str | None:
    """A short value for a public constant or type alias (None for an opaque object)."""
    if get_origin(obj) is Literal:
        return "Literal[" + ", ".join(repr(a) for a in get_args(obj)) + "]"
    if isinstance(obj, dict | tuple | list | str | int | float):
        return repr(obj)
    return None


# --------------------------------------------------------------------------- Markdown


def cell(text: str) -> str:
    """Text for a Markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


#: A Sphinx cross-reference in a docstring (``:mod:`rlvr.data` ``, ``:func:`~rlvr.train` ``),
#: which Markdown would print as written.
SPHINX_ROLE = re.compile(r":(?:py:)?[a-z]+:`~?([^`]+)`")


def prose(text: str) -> str:
    """Plain text (a docstring, a description) as Markdown that shows it as written: Sphinx
    cross-references become code spans of their target, and the characters Markdown would read
    as markup are escaped outside `code spans`."""
    parts = re.split(r"(`+[^`]*`+)", SPHINX_ROLE.sub(r"`\1`", text))
    return "".join(
        part if part.startswith("`") else re.sub(r"([\\*_\[\]<>#~$])", r"\\\1", part)
        for part in parts
    )


def code(text: str) -> str:
    if not text:
        return ""
    tick = "``" if "`" in text else "`"
    pad = " " if tick == "``" else ""
    return f"{tick}{pad}{text}{pad}{tick}"


def anchor(*parts: str) -> str:
    """An explicit MyST target name: ``config-model-lora``, ``plugin-reward-answer``."""
    slug = "-".join(parts).lower()
    return re.sub(r"[^a-z0-9]+", "-", slug).strip("-")


def key_table(rows: tuple[Row, ...] | list[Row], link_prefix: str | None = None) -> list[str]:
    """A table of keys; with ``link_prefix``, a key with keys of its own links to their table
    (the target ``anchor(link_prefix, row.nested)``)."""
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for r in rows:
        default = (
            r.default if r.default.startswith("(") or r.default == "required" else code(r.default)
        )
        text = prose(r.description)
        if link_prefix is not None and r.nested:
            target = anchor(link_prefix, r.nested)
            text += f" (its keys: [{code(r.nested)}](#{target}))"
        lines.append(f"| {cell(code(r.key))} | {cell(r.type)} | {cell(default)} | {cell(text)} |")
    return lines


def render_config() -> str:
    """The config reference: the sections, then every key of each, then TRL's keys."""
    sections = key_table(section_rows(), "config")
    lines = ["(config-sections)=", "## The sections", "", *sections, ""]
    for table in config_tables():
        lines += [f"({anchor('config', table.path)})=", f"## `{table.path}`", ""]
        if table.doc:
            lines += [prose(table.doc), ""]
        lines += [*key_table(table.rows, "config"), ""]
    lines += [
        "(config-trl-keys)=",
        "## TRL keys",
        "",
        "Every field of TRL's `GRPOConfig` (its own and the `TrainingArguments` it inherits) is "
        "decided here: pasted under a top-level `trl:` section it keeps TRL's meaning and units "
        "(and a key the section leaves out has TRL's default where it differs from rlvr's); "
        "under `training:` the same keys keep rlvr's units. *mapped*: an rlvr `training` key of "
        "the same name; *moved*: another home; *ignored*: dropped with a one-line warning that "
        "says why; *error*: rlvr would not do what TRL does, and the message says the fix. "
        "The table is `rlvr.compat.trl.keys.TRL_KEYS`, rendered by `trl_keys_markdown()`.",
        "",
        trl_keys_markdown(),
    ]
    return "\n".join(lines)


def render_plugins(docs: list[PluginDoc] | None = None) -> str:
    """The built-in plugins, by kind: each one's description and params."""
    docs = plugin_docs() if docs is None else docs
    titles = {
        "reward": "Rewards",
        "algorithm": "Algorithms",
        "backend": "Backends",
        "environment": "Environments",
        "callback": "Callbacks",
        "data_source": "Data sources",
    }
    lines: list[str] = []
    kind = None
    for doc in docs:
        if doc.kind != kind:
            kind = doc.kind
            names = ", ".join(code(d.name) for d in docs if d.kind == kind)
            lines += [f"({anchor('plugins', kind)})=", f"## {titles.get(kind, kind)}", ""]
            lines += [f"Built in: {names}.", ""]
        lines += [f"({anchor('plugin', doc.kind, doc.name)})=", f"### `{doc.name}`", ""]
        lines += [prose(doc.description), ""]
        lines += [f"Params model: {code(doc.params_model)}.", ""]
        rows = [r for t in doc.tables for r in _qualified_rows(t)]
        if rows:
            lines += [*key_table(rows), ""]
        else:
            lines += ["No params.", ""]
    return "\n".join(lines)


def _qualified_rows(table: Table) -> list[Row]:
    """A nested params table's rows keyed from the plugin's params (``close[].rel_tol``)."""
    return [Row(_join(table.path, r.key), r.type, r.default, r.description) for r in table.rows]


def render_cli(commands: list[Command] | None = None) -> str:
    commands = cli_commands() if commands is None else commands
    lines: list[str] = []
    for cmd in commands:
        depth = min(cmd.path.count(" ") + 2, 4)
        lines += [f"({anchor('cli', cmd.path)})=", f"{'#' * depth} `{cmd.path}`", ""]
        if cmd.help:
            text = cmd.help[0].upper() + cmd.help[1:]
            lines += [prose(text if text.endswith(".") else text + "."), ""]
        lines += ["```text", cmd.usage, "```", ""]
        if cmd.options:
            lines += ["| argument | required | default | what |", "|---|---|---|---|"]
            for o in cmd.options:
                lines.append(
                    f"| {cell(code(o.names))} | {'yes' if o.required else ''} "
                    f"| {cell(code(o.default))} | {cell(prose(o.help))} |"
                )
            lines.append("")
        if cmd.subcommands:
            lines += ["Subcommands: " + ", ".join(code(s) for s in cmd.subcommands) + ".", ""]
    return "\n".join(lines)


def render_api(tier: str = "rlvr") -> str:
    """One tier of the public API: autodoc of every name in ``tier.__all__``, by section."""

    lines: list[str] = []
    for title, names in api_names(tier).items():
        lines += [f"### {title}", "", "```{eval-rst}"]
        for name, kind, module in names:
            if kind == "data":
                lines.append(f".. py:data:: {tier}.{name}")
                value = _data_value(getattr(importlib.import_module(tier), name))
                if value is not None:
                    lines.append(f"   :value: {value}")
                doc = attr_doc(module, name)
                lines += ["", f"   {doc}"] if doc else []
            else:
                lines.append(f".. auto{kind}:: {tier}.{name}")
                if kind == "class":
                    lines.append("   :members:")
            lines.append("")
        lines += ["```", ""]
    return "\n".join(lines)


RENDERERS: dict[str, Callable[[], str]] = {
    "config": render_config,
    "plugins": render_plugins,
    "cli": render_cli,
    **{f"api-{key}": functools.partial(render_api, tier) for key, tier in API_TIERS.items()},
}
MARKER = re.compile(r"^<!-- rlvr-reference: ([\w-]+) -->$", re.MULTILINE)


def expand_markers(text: str) -> str:
    """``text`` with each ``<!-- rlvr-reference: NAME -->`` line replaced by its page part."""

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in RENDERERS:
            raise ValueError(f"unknown rlvr-reference {name!r}; known: {', '.join(RENDERERS)}")
        return RENDERERS[name]()

    return MARKER.sub(sub, text)


# --------------------------------------------------------------------------- Sphinx


def _source_read(app: Any, docname: str, source: list[str]) -> None:
    if MARKER.search(source[0]):
        source[0] = expand_markers(source[0])


def _always_outdated(app: Any, env: Any, added: set, changed: set, removed: set) -> list[str]:
    """Pages with generated parts are read again on every build: the code may have changed
    though their Markdown did not."""
    return [
        name
        for name in env.found_docs
        if name not in added | changed and MARKER.search(_read(env.doc2path(name)))
    ]


def _read(path: Any) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", _source_read)
    app.connect("env-get-outdated", _always_outdated)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
