"""``datasets``: the rows ``datasets.load_dataset`` returns for its arguments and a split."""

from __future__ import annotations

import datasets

from rlvr import RlvrError
from rlvr.plugins.data.params import DatasetsParams


class DatasetsError(RlvrError, ValueError):
    """``load_dataset`` failed; the message says with which arguments and why."""


def dataset_rows(params: DatasetsParams, split: str) -> datasets.Dataset:
    """``load_dataset(path, name, data_files=..., revision=..., split=split, **kwargs)``."""
    try:
        ds = datasets.load_dataset(
            params.path,
            params.name,
            data_files=params.data_files,
            revision=params.revision,
            split=split,
            **params.kwargs,
        )
    except Exception as exc:  # offline, unknown name or split, a bad builder argument
        config = f" ({params.name})" if params.name else ""
        raise DatasetsError(
            f"data source datasets: cannot load {params.path!r}{config}, split {split!r}: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    return ds  # rlvr reads the rows it keeps (data.max_samples) into memory


__all__ = ["DatasetsError", "dataset_rows"]
