"""rlvr's built-in data sources: ``file`` (``data.path``), ``datasets`` (``load_dataset``'s
arguments) and ``reasoning_gym`` (``data.reasoning_gym``).

Laid out as every plugin family is: this module holds the hook and one ``register(...)`` per
source; each source is a module of its own, named by its ``LazyFactory`` and imported only
when rows load (``rlvr plugins`` imports neither ``datasets`` nor reasoning-gym).
"""

from __future__ import annotations

from collections.abc import Callable

from rlvr.plugin import DataSource, LazyFactory, hookimpl
from rlvr.plugins.data.params import DatasetsParams, FileParams, ReasoningGymParams


@hookimpl
def rlvr_register_data_sources(register: Callable[[DataSource], None]) -> None:
    register(
        DataSource(
            name="file",
            params=FileParams,
            factory=LazyFactory("rlvr.plugins.data.files:file_rows"),
            description="a .json/.jsonl/.parquet file, a directory of them, or a hub dataset "
            "(data.path)",
        )
    )
    register(
        DataSource(
            name="datasets",
            params=DatasetsParams,
            factory=LazyFactory("rlvr.plugins.data.hub:dataset_rows"),
            description="datasets.load_dataset(path, name, data_files=..., ...) at data.split",
        )
    )
    register(
        DataSource(
            name="reasoning_gym",
            params=ReasoningGymParams,
            factory=LazyFactory("rlvr.plugins.data.generated:reasoning_gym_split"),
            description="a reasoning-gym task, hash-split into training and held-out rows "
            "(data.reasoning_gym; needs rlvr[reasoning-gym])",
            held_out=True,
        )
    )


__all__ = ["rlvr_register_data_sources"]
