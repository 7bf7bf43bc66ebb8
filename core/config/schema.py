"""The run config's names in one place, for the modules, tests and scripts that import them.

The config is built in steps, each its own module: :mod:`~rlvr.config.sections` (the core
sections), :mod:`~rlvr.config.run_config` (the whole config and its plugin entries),
:mod:`~rlvr.config.loading` (the file, ``--set``, paths, opt-ins), :mod:`~rlvr.config.validation`
(the whole dict at once), :mod:`~rlvr.config.plugin_params` (each entry's params) and
:mod:`~rlvr.config.checks` (what no single section can check).
"""

from __future__ import annotations

from rlvr.config.checks import (
    MAX_ADAM_LR,
    PEFT_INSTALL_HINT,
    cross_check,
    learning_warnings,
    multi_turn,
    peft_missing,
    requirements,
)
from rlvr.config.few_shot import FewShotExample
from rlvr.config.loading import (
    ALLOW_CODE_FLAG,
    PATH_KEYS,
    TRUST_REMOTE_CODE_FLAG,
    CodeOptInError,
    apply_overrides,
    check_code_opt_ins,
    data_set,
    load_config,
    read_file,
    resolve_paths,
)
from rlvr.config.plugin_params import data_source_params, json_schema
from rlvr.config.problems import ConfigError
from rlvr.config.run_config import (
    DEFAULT_ALGORITHM,
    DEFAULT_BACKEND,
    DEFAULT_ENVIRONMENT,
    SECTIONS,
    EnvironmentEntry,
    PluginEntry,
    PluginParams,
    RewardEntry,
    RunConfig,
    dump,
)
from rlvr.config.sections import (
    DATA_SHORTHANDS,
    CollapseConfig,
    DataConfig,
    GuidanceConfig,
    LoraConfig,
    ModelConfig,
    ReasoningGymConfig,
    Section,
    TrainingConfig,
    data_source_entry,
)
from rlvr.config.validation import validate

__all__ = [
    "ALLOW_CODE_FLAG",
    "DATA_SHORTHANDS",
    "DEFAULT_ALGORITHM",
    "DEFAULT_BACKEND",
    "DEFAULT_ENVIRONMENT",
    "MAX_ADAM_LR",
    "PATH_KEYS",
    "PEFT_INSTALL_HINT",
    "SECTIONS",
    "TRUST_REMOTE_CODE_FLAG",
    "CodeOptInError",
    "CollapseConfig",
    "ConfigError",
    "DataConfig",
    "EnvironmentEntry",
    "FewShotExample",
    "GuidanceConfig",
    "LoraConfig",
    "ModelConfig",
    "PluginEntry",
    "PluginParams",
    "ReasoningGymConfig",
    "RewardEntry",
    "RunConfig",
    "Section",
    "TrainingConfig",
    "apply_overrides",
    "check_code_opt_ins",
    "cross_check",
    "data_set",
    "data_source_entry",
    "data_source_params",
    "dump",
    "json_schema",
    "learning_warnings",
    "load_config",
    "multi_turn",
    "peft_missing",
    "read_file",
    "requirements",
    "resolve_paths",
    "validate",
]
