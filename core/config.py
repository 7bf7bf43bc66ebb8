"""The run config: one YAML (or TOML) file, validated as a whole before anything loads.

The schema is built from the plugin registry: each ``rewards[]``, ``algorithm`` and ``backend``
entry is a union discriminated on ``name`` whose ``params`` is that plugin's own model. All
problems are reported at once, each with its path (``rewards[1].params.tolerance``).
"""

from __future__ import annotations

import difflib
import tomllib
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from rlvr.errors import RlvrError
from rlvr.host import Host
from rlvr.records import Params, Requirements

SECTIONS = ("model", "data", "rewards", "algorithm", "backend", "training")
DEFAULT_ALGORITHM = "grpo"
DEFAULT_BACKEND = "hf"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelConfig(Section):
    """Which policy to train."""

    name_or_path: str = Field(description="hub id, local directory, or a .gguf file")
    gguf_file: str | None = Field(None, description="GGUF file inside name_or_path, if any")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="auto: bfloat16 on CUDA, float32 on CPU"
    )
    trust_remote_code: bool = False
    revision: str | None = None
    attn_implementation: str | None = None


class DataConfig(Section):
    """Where prompts come from; every field of a row reaches the rewards."""

    path: str = Field(description="a .json/.jsonl/.parquet file or directory, or a hub dataset")
    split: str = "train"
    prompt_field: str = "prompt"
    system_prompt: str | None = None
    chat_template: bool | None = Field(
        None, description="use the tokenizer's chat template (default: when it has one)"
    )
    eval_path: str | None = Field(None, description="eval data (default: same path)")
    eval_split: str | None = "test"
    max_samples: int | None = Field(None, ge=1, description="use only the first N rows")
    shuffle: bool = True


# Keys of TRL's GRPOConfig/TrainingArguments that rlvr accepts and ignores, with why.
TRL_IGNORED = {
    "bf16": "rlvr picks bf16 on CUDA automatically (model.dtype)",
    "fp16": "rlvr picks the dtype automatically (model.dtype)",
    "use_vllm": "choose the generator with backend.name: vllm",
    "vllm_mode": "set backend params instead",
    "vllm_gpu_memory_utilization": "set backend.params.gpu_memory_utilization",
    "log_completions": "rlvr always writes samples.jsonl",
    "remove_unused_columns": "rlvr passes every column to the rewards",
    "dataloader_num_workers": "rlvr reads data in-process",
    "logging_dir": "logs go to output_dir",
    "overwrite_output_dir": "rlvr never deletes a run; use a new output_dir",
    "do_train": "not used",
    "push_to_hub": "not supported offline",
}

# TRL keys that belong to an algorithm's params in rlvr: moved there when the algorithm has them.
TRL_ALGORITHM_KEYS = (
    "beta",
    "epsilon",
    "epsilon_high",
    "scale_rewards",
    "loss_type",
    "num_iterations",
    "mask_truncated_completions",
    "delta",
)


class TrainingConfig(Section):
    """Optimisation and sampling settings, named as in TRL's GRPOConfig.

    One deliberate difference: ``per_device_train_batch_size`` counts *prompts*, each sampled
    ``num_generations`` times (in TRL it counts completions).
    """

    output_dir: str = "outputs/run"
    seed: int = 42
    learning_rate: float = Field(1e-6, gt=0)
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    weight_decay: float = 0.0
    optim: Literal["adamw_torch", "adamw_torch_fused", "adamw", "sgd"] = "adamw_torch"
    lr_scheduler_type: Literal[
        "linear", "cosine", "constant", "constant_with_warmup", "cosine_with_min_lr"
    ] = "linear"
    warmup_ratio: float = Field(0.0, ge=0, le=1)
    warmup_steps: int = Field(0, ge=0)
    max_grad_norm: float = 1.0
    per_device_train_batch_size: int = Field(8, ge=1, description="prompts per micro-batch")
    gradient_accumulation_steps: int = Field(1, ge=1)
    num_generations: int = Field(8, ge=1, description="completions sampled per prompt")
    max_prompt_length: int | None = Field(512, ge=1)
    max_completion_length: int = Field(256, ge=1)
    max_steps: int = Field(-1, description="optimizer steps; -1 = num_train_epochs")
    num_train_epochs: float = Field(1.0, gt=0)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0, le=1)
    repetition_penalty: float = Field(1.0, gt=0)
    logging_steps: int = Field(1, ge=1)
    save_steps: int = Field(500, ge=1)
    save_total_limit: int | None = Field(None, ge=1)
    eval_steps: int | None = Field(None, ge=1)
    report_to: list[str] | str = "none"
    gradient_checkpointing: bool = False
    log_samples_steps: int = Field(10, ge=1, description="write sample completions every N steps")
    reward_workers: int = Field(2, ge=0, description="reward worker processes (0: in-process)")
    max_bad_steps: int = Field(3, ge=1, description="stop after this many non-finite losses")

    @model_validator(mode="after")
    def _check(self) -> TrainingConfig:
        reports = [self.report_to] if isinstance(self.report_to, str) else self.report_to
        bad = [r for r in reports if r not in {"none", "tensorboard", "wandb", "all"}]
        if bad:
            raise ValueError(f"report_to: unknown {bad}; use any of none, tensorboard, wandb, all")
        return self


class RewardEntryBase(Section):
    """Fields every reward entry has besides ``name`` and ``params``."""

    label: str | None = Field(None, description="name in logs (default: the reward's name)")
    weight: float = 1.0
    timeout: float = Field(10.0, gt=0, description="seconds per call before the fallback")
    fallback: float = Field(0.0, description="value of a call that times out or crashes")

    @property
    def key(self) -> str:
        return self.label or self.name  # type: ignore[attr-defined]


class PluginEntry(Section):
    pass


class ConfigError(RlvrError):
    """A config with problems; ``problems`` lists ``(path, message)`` pairs."""

    def __init__(self, problems: list[tuple[str, str]], source: str | None = None):
        self.problems = problems
        self.source = source
        super().__init__(self.format())

    def format(self) -> str:
        head = f"{self.source}: " if self.source else ""
        n = len(self.problems)
        lines = [f"{head}{n} problem{'s' if n != 1 else ''} in the config:"]
        lines += [f"  {path or '(top level)'}: {msg}" for path, msg in self.problems]
        return "\n".join(lines)


# --------------------------------------------------------------------------- schema


def _entry_model(kind: str, record: Any, base: type[BaseModel]) -> type[BaseModel]:
    params_model: type[Params] = record.params
    # A params model with required fields makes `params:` itself required (an error at its path).
    required = any(f.is_required() for f in params_model.model_fields.values())
    default = Field(...) if required else Field(default_factory=params_model)
    return create_model(
        f"{kind.title()}_{record.name}",
        __base__=base,
        __doc__=record.description,
        name=(Literal[record.name], ...),  # type: ignore[arg-type]  # a Literal built at runtime
        params=(params_model, default),
    )


def _union(kind: str, host: Host, base: type[BaseModel]) -> Any:
    models = [_entry_model(kind, r, base) for r in host.records[kind].values()]
    if not models:
        # No plugin of this kind: any name is rejected with a message from _unknown_names.
        return create_model(f"{kind.title()}_none", __base__=base, name=(str, ...))
    if len(models) == 1:
        return models[0]
    return Annotated[Union[tuple(models)], Field(discriminator="name")]  # noqa: UP007


def build_model(host: Host) -> type[BaseModel]:
    """The pydantic model of a whole run config, for the plugins ``host`` has loaded."""
    reward = _union("reward", host, RewardEntryBase)
    algorithm = _union("algorithm", host, PluginEntry)
    backend = _union("backend", host, PluginEntry)
    return create_model(
        "RunConfig",
        __base__=Section,
        model=(ModelConfig | None, None),
        data=(DataConfig | None, None),
        rewards=(list[reward], Field(default_factory=list)),  # type: ignore[valid-type]
        algorithm=(algorithm | None, None),
        backend=(backend | None, None),
        training=(TrainingConfig, Field(default_factory=TrainingConfig)),
    )


def json_schema(host: Host) -> dict[str, Any]:
    return build_model(host).model_json_schema()


# --------------------------------------------------------------------------- loading


def read_file(path: str | Path) -> dict[str, Any]:
    """Parse a YAML or TOML config file into a dict (a clear error if it is not one)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError([("", f"config file {str(p)!r} does not exist")])
    text = p.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text) if p.suffix == ".toml" else yaml.safe_load(text)
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError([("", f"cannot parse {p.name}: {exc}")], source=str(p)) from None
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
        value = _parse_value(raw)
        node: Any = data
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise ConfigError([(key, f"no list item {part!r} (the list has {len(node)})")])
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
                raise ConfigError([(key, f"{'.'.join(parts[:i])} is not a section or list")])
    return data


def _parse_value(raw: str) -> Any:
    """A ``--set`` value as YAML, plus what YAML 1.1 misses: ``1e-3`` is a float."""
    value = yaml.safe_load(raw) if raw.strip() else ""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    return value


def data_set(data: dict[str, Any], parts: list[str], value: Any) -> Any:
    node = data
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[parts[-1]] = value
    return value


def load_config(
    source: str | Path | dict[str, Any],
    host: Host,
    *,
    overrides: list[str] = (),  # type: ignore[assignment]
    require: tuple[str, ...] = (),
) -> Any:
    """Read, override, validate and cross-check a config; raise :class:`ConfigError` with all
    problems. ``require`` names the sections the calling command needs."""
    label = None if isinstance(source, dict) else str(source)
    data = dict(source) if isinstance(source, dict) else read_file(source)
    data = apply_overrides(data, list(overrides))
    try:
        return validate(data, host, require=require)
    except ConfigError as exc:
        exc.source = label
        raise ConfigError(exc.problems, source=label) from None


def validate(data: dict[str, Any], host: Host, *, require: tuple[str, ...] = ()) -> Any:
    """Validate a config dict against the registry; cross-checks run when the schema passes."""
    data = _with_defaults(data, require)
    problems = _missing_sections(data, require) + _unknown_names(data, host)
    problems += _move_trl_keys(data, host)
    model = build_model(host)
    config = None
    try:
        config = model.model_validate(data)
    except ValidationError as exc:
        known = {p for p, _ in problems}
        problems += [p for p in _pydantic_problems(exc, data, model) if p[0] not in known]
    if problems:
        raise ConfigError(problems)
    problems = cross_check(config, host)
    if problems:
        raise ConfigError(problems)
    return config


def _with_defaults(data: dict[str, Any], require: tuple[str, ...]) -> dict[str, Any]:
    data = dict(data)
    for section, default in (("algorithm", DEFAULT_ALGORITHM), ("backend", DEFAULT_BACKEND)):
        if section in require and data.get(section) is None:
            data[section] = {"name": default}
    return data


def _missing_sections(data: dict[str, Any], require: tuple[str, ...]) -> list[tuple[str, str]]:
    problems = []
    for section in require:
        if data.get(section) in (None, [], {}):
            problems.append((section, f"this command needs a `{section}:` section"))
    for key in data:
        if key not in SECTIONS:
            hint = difflib.get_close_matches(key, SECTIONS, n=1)
            msg = f"unknown section {key!r}"
            msg += f"; did you mean {hint[0]!r}?" if hint else ""
            problems.append((key, msg + f" Sections: {', '.join(SECTIONS)}."))
    return problems


def _unknown_names(data: dict[str, Any], host: Host) -> list[tuple[str, str]]:
    """Plugin names that are not registered, with did-you-mean and failed plugins."""
    problems = []
    entries: list[tuple[str, str, Any]] = []
    rewards = data.get("rewards")
    if isinstance(rewards, list):
        entries += [("reward", f"rewards[{i}]", e) for i, e in enumerate(rewards)]
    elif rewards is not None:
        problems.append(("rewards", "must be a list of {name, weight, params} entries"))
    entries += [(k, k, data.get(k)) for k in ("algorithm", "backend") if data.get(k) is not None]
    for kind, path, entry in entries:
        if not isinstance(entry, dict):
            problems.append((path, f"must be a mapping with a `name` (got {entry!r})"))
        elif "name" not in entry:
            names = ", ".join(sorted(host.records[kind]))
            problems.append((f"{path}.name", f"missing; available {kind}s: {names}"))
        elif entry["name"] not in host.records[kind]:
            problems.append((f"{path}.name", host.unknown_message(kind, str(entry["name"]))))
    return problems


def _move_trl_keys(data: dict[str, Any], host: Host) -> list[tuple[str, str]]:
    """Accept TRL's GRPOConfig block pasted into ``training:`` unchanged: algorithm knobs
    (beta, epsilon, ...) move to ``algorithm.params`` when the algorithm has them; keys rlvr
    has no use for are dropped with a warning that says why."""
    training = data.get("training")
    if not isinstance(training, dict):
        return []
    training = data["training"] = dict(training)
    problems = []
    for key, why in TRL_IGNORED.items():
        if key in training:
            training.pop(key)
            warnings.warn(f"training.{key} is ignored: {why}", stacklevel=2)
    algo = data.get("algorithm")
    record = None
    if isinstance(algo, dict):
        record = host.records["algorithm"].get(str(algo.get("name")))
    for key in TRL_ALGORITHM_KEYS:
        if key not in training:
            continue
        if record is None or key not in record.params.model_fields:
            continue  # left in place: validation reports it as an unknown key
        algo = data["algorithm"] = dict(data["algorithm"])
        params = algo["params"] = dict(algo.get("params") or {})
        if key in params and params[key] != training[key]:
            problems.append(
                (f"training.{key}", f"also set as algorithm.params.{key}; keep only one")
            )
        params.setdefault(key, training.pop(key))
    return problems


def _pydantic_problems(
    exc: ValidationError, data: dict[str, Any], model: type[BaseModel]
) -> list[tuple[str, str]]:
    problems = []
    for err in exc.errors():
        if err["type"] in {"union_tag_invalid", "union_tag_not_found"}:
            continue  # reported by _unknown_names with a did-you-mean
        path = _path(err["loc"], data)
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = _unknown_key_message(str(err["loc"][-1]), _model_at(model, err["loc"][:-1]))
        elif err["type"] == "missing":
            msg = "required field is missing"
            params = _model_at(model, err["loc"]) if path.endswith("params") else None
            if params is not None:
                need = [k for k, f in params.model_fields.items() if f.is_required()]
                msg = f"required field is missing: this plugin needs {', '.join(need)}"
        problems.append((path, msg))
    return problems


def _unknown_key_message(key: str, model: type[BaseModel] | None) -> str:
    msg = f"unknown key {key!r}"
    if model is not None:
        fields = list(model.model_fields)
        close = difflib.get_close_matches(key, fields, n=1)
        if close:
            msg += f"; did you mean {close[0]!r}?"
        msg += f" Valid keys: {', '.join(fields)}."
    return msg


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside an annotation (through Optional, list, unions, Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose fields the error at ``loc`` (without its last part) refers to."""
    models = [root]
    for part in loc:
        if isinstance(part, int):
            continue
        tagged = [m for m in models if _tag(m) == part]
        if tagged:
            models = tagged
            continue
        found = [m.model_fields[part].annotation for m in models if part in m.model_fields]
        if not found:
            return None
        models = _models_in(found[0])
    return models[0] if len(models) == 1 else None


def _tag(model: type[BaseModel]) -> str | None:
    field = model.model_fields.get("name")
    args = get_args(field.annotation) if field else ()
    return args[0] if len(args) == 1 and isinstance(args[0], str) else None


def _path(loc: tuple[Any, ...], data: Any) -> str:
    """``('rewards', 1, 'answer', 'params', 'x')`` -> ``rewards[1].params.x`` (drops the
    discriminator tag pydantic inserts)."""
    out = ""
    node = data
    for part in loc:
        is_tag = isinstance(node, dict) and part not in node and node.get("name") == part
        if is_tag:
            continue  # the discriminator tag pydantic inserts
        if isinstance(part, int):
            out += f"[{part}]"
            node = node[part] if isinstance(node, list) and part < len(node) else None
        else:
            out += f".{part}" if out else str(part)
            node = node.get(part) if isinstance(node, dict) else None
    return out


# --------------------------------------------------------------------------- cross checks


def requirements(config: Any, host: Host) -> Requirements:
    """The configured algorithm's requirements (defaults when no algorithm is configured)."""
    if config.algorithm is None:
        return Requirements()
    record = host.algorithms[config.algorithm.name]
    return record.requirements(config.algorithm.params)


def cross_check(config: Any, host: Host) -> list[tuple[str, str]]:
    """Checks no single section can make: the generic ones here, the rest from plugins."""
    problems: list[tuple[str, str]] = []
    labels: dict[str, int] = {}
    for i, entry in enumerate(config.rewards):
        if entry.key in labels:
            problems.append(
                (
                    f"rewards[{i}].label",
                    f"{entry.key!r} is already used by rewards[{labels[entry.key]}]; give each "
                    "entry of the same reward a distinct `label`",
                )
            )
        labels.setdefault(entry.key, i)
    if config.backend is not None:
        backend = host.backends[config.backend.name]
        missing = backend.available()
        if missing:
            problems.append(("backend.name", missing))
    if config.algorithm is not None:
        req = requirements(config, host)
        name = config.algorithm.name
        n = config.training.num_generations
        if n < req.min_group_size:
            problems.append(
                (
                    "training.num_generations",
                    f"{name} compares completions of the same prompt and needs at least "
                    f"{req.min_group_size} per prompt (got {n}); set training.num_generations "
                    f">= {req.min_group_size}",
                )
            )
        if config.backend is not None:
            caps = host.backends[config.backend.name].capabilities
            bname = config.backend.name
            if req.sampler_logprobs and not caps.sampler_logprobs:
                problems.append(
                    (
                        "backend.name",
                        f"{name} needs the sampler's log-probabilities, which backend {bname!r} "
                        "does not return; use a backend that does (e.g. vllm)",
                    )
                )
            if req.reference_model and not caps.reference_logprobs:
                problems.append(
                    (
                        "algorithm.params.beta",
                        f"a KL penalty needs a reference model, which backend {bname!r} cannot "
                        "provide; set algorithm.params.beta: 0",
                    )
                )
    problems += host.validate_hooks(config)
    return problems


def dump(config: Any) -> str:
    """The resolved config (defaults filled in) as YAML."""
    data = config.model_dump(mode="json", exclude_none=False)
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
