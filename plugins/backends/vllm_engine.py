"""rlvr's weight-transfer engine for vLLM servers on the same machine: ``rlvr_shm``.

vLLM's own engines move weights over NCCL or CUDA IPC, which a CPU server has neither of. This
one takes them from a safetensors file the trainer wrote to shared memory (``/dev/shm``): the
trainer posts the file's path to ``/update_weights``, the server's worker loads it through the
model's ``load_weights`` inside vLLM's layerwise reload, as vLLM's checkpoint-format engines do.
It works wherever trainer and server share a filesystem, CPU or GPU. vLLM loads this module in
its own processes only, through the ``vllm.general_plugins`` entry point (:func:`register`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from safetensors.torch import load_file
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
from vllm.model_executor.model_loader.reload import (
    finalize_layerwise_reload,
    initialize_layerwise_reload,
)

NAME = "rlvr_shm"


@dataclass
class SharedFileInit(WeightTransferInitInfo):
    pass


@dataclass
class SharedFileUpdate(WeightTransferUpdateInfo):
    #: a safetensors file of the weights, by their Hugging Face names
    path: str


class SharedFileEngine(WeightTransferEngine[SharedFileInit, SharedFileUpdate]):
    init_info_cls = SharedFileInit
    update_info_cls = SharedFileUpdate
    supports_draft_weight_update = False

    def init_transfer_engine(self, init_info: SharedFileInit) -> None:
        """Nothing to connect: each update names its file."""

    def start_weight_update(self) -> None:
        initialize_layerwise_reload(self.model)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        # The base class synchronizes an accelerator, which a CPU server has not.
        self.receive_weights(self.parse_update_info(update_info))

    def receive_weights(self, update_info: SharedFileUpdate) -> None:
        tensors = load_file(update_info.path, device=str(self.device))
        with torch.no_grad():
            model: Any = self.model  # a vLLM model: it has load_weights
            model.load_weights(iter(tensors.items()))

    def finish_weight_update(self) -> None:
        finalize_layerwise_reload(self.model, self.model_config)

    def shutdown(self) -> None:
        """Nothing held between updates."""


def register() -> None:
    """vLLM's general-plugin hook: make ``--weight-transfer-config '{"backend": "rlvr_shm"}'``
    name this engine (called once in each vLLM process)."""
    if NAME not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(NAME, SharedFileEngine)
