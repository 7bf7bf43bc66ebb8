"""The params of the built-in data sources (``data: {source: NAME, params: {...}}``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from rlvr._builtin import ReasoningGymConfig
from rlvr.plugin import Params


def against_config_dir(value: str, info: ValidationInfo) -> str:
    """A relative path that exists under the config file's directory, made absolute there (as
    ``data.path``'s is); anything else (a hub name, an absolute path) as written."""
    path = Path(value).expanduser()
    base = (info.context or {}).get("config_dir")
    if path.is_absolute() or base is None:
        return value
    candidate = Path(base) / path
    local = value.startswith((".", "~")) or candidate.exists()
    return os.path.normpath(candidate.absolute()) if local else value


class FileParams(Params):
    """``file``: a .json/.jsonl/.parquet file, a directory of them, or a hub dataset name
    (what ``data.path`` names; ``data.path: X`` is ``source: file, params: {path: X}``)."""

    path: str = Field(
        min_length=1,
        description="a .json/.jsonl/.parquet file or a directory of them (relative: to the "
        "config file), or a hub dataset name",
    )

    @field_validator("path")
    @classmethod
    def _resolve(cls, value: str, info: ValidationInfo) -> str:
        return against_config_dir(value, info)


class DatasetsParams(Params):
    """``datasets``: ``datasets.load_dataset``'s arguments; the split is ``data.split`` for
    training, ``data.eval_split`` for evaluation."""

    path: str = Field(
        min_length=1,
        description="load_dataset's path: a hub dataset (openai/gsm8k), a builder (json, csv, "
        "parquet) or a local directory",
    )
    name: str | None = Field(None, description="the dataset's configuration (gsm8k: main)")
    data_files: str | list[str] | dict[str, str | list[str]] | None = Field(
        None, description="the files a builder reads, by split: {train: a.jsonl, test: b.jsonl}"
    )
    revision: str | None = Field(None, description="hub branch, tag or commit of the dataset")
    kwargs: dict[str, Any] = Field(
        default_factory=dict, description="further load_dataset keyword arguments"
    )

    @field_validator("kwargs")
    @classmethod
    def _not_split(cls, value: dict[str, Any]) -> dict[str, Any]:
        taken = sorted({"split", "path", "name", "data_files", "revision"} & set(value))
        if taken:
            raise ValueError(
                f"{', '.join(taken)}: set {'them' if len(taken) > 1 else 'it'} as a param of its "
                "own (the split as data.split / data.eval_split), not in kwargs"
            )
        return value


class ReasoningGymParams(Params, ReasoningGymConfig):
    """``reasoning_gym``: a reasoning-gym task, split by a hash of each question into training
    rows (split ``train``) and held-out ones (``test``); ``data.reasoning_gym: {...}`` is
    ``source: reasoning_gym, params: {...}``."""


__all__ = ["DatasetsParams", "FileParams", "ReasoningGymParams"]
