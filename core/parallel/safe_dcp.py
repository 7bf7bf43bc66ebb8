"""Reading a ``torch.distributed.checkpoint`` (DCP) directory without running code from it.

DCP's own reader unpickles ``.metadata`` with plain ``pickle.load``, and its load planner reads
every non-tensor entry (an optimizer's ``param_groups``) with ``torch.load(weights_only=False)``:
a planted ``.metadata`` runs whatever it names. The tensors themselves are already read with
``weights_only=True``. So the pickle cannot be avoided (it is DCP's format), but what it may
build can be restricted: :class:`SafeReader` unpickles the metadata with an allow-list of the
classes DCP writes there (its metadata dataclasses, ``torch.Size``, dtypes, layouts and paths),
and :class:`WeightsOnlyPlanner` reads the other entries with ``weights_only=True``. Anything
else is refused with an ``UnpicklingError`` naming the file and the global.
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import torch
import torch.distributed.checkpoint.metadata as dcp_metadata
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import _StorageInfo

#: (module, name) pairs the metadata may name, besides torch's dtypes.
_ALLOWED = {
    *(
        (dcp_metadata.__name__, name)
        for name, obj in vars(dcp_metadata).items()
        if isinstance(obj, type) and obj.__module__ == dcp_metadata.__name__
    ),
    (_StorageInfo.__module__, _StorageInfo.__name__),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "Path"),
    ("pathlib", "PosixPath"),
    ("pathlib", "WindowsPath"),
    ("collections", "OrderedDict"),
}


class _MetadataUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, name: str) -> None:
        super().__init__(file)
        self.name = name

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED or (
            module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        ):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"{self.name} names {module}.{name}, which a DCP checkpoint's metadata never holds; "
            "refusing to load it (it could run code)"
        )


class SafeReader(FileSystemReader):
    """DCP's file reader, with the metadata unpickled through the allow-list."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        path = self._get_metadata_path(kwargs.get("rank"))
        with self.fs.create_stream(path, "rb") as f:
            metadata = _MetadataUnpickler(f, str(path)).load()
        if not isinstance(metadata, dcp_metadata.Metadata):
            raise pickle.UnpicklingError(f"{path} holds a {type(metadata).__name__}, not DCP's")
        storage = getattr(metadata, "storage_meta", None) or dcp_metadata.StorageMeta()
        storage.load_id = self.load_id
        metadata.storage_meta = storage
        return metadata


class WeightsOnlyPlanner(DefaultLoadPlanner):
    """DCP's load planner, reading non-tensor entries with ``torch.load(weights_only=True)``
    (the parent then reads back the value re-saved from that safe load, not the file's)."""

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        obj = torch.load(value, weights_only=True)
        safe = io.BytesIO()
        torch.save(obj, safe)
        safe.seek(0)
        super().load_bytes(read_item, safe)


__all__ = ["SafeReader", "WeightsOnlyPlanner"]
