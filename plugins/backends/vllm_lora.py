"""LoRA adapters applied by vLLM itself (``backend.params.lora_sync``), colocated or in servers.

A LoRA policy changes only its adapters, a few MB, while its base weights stay frozen. Instead
of merging ``W + scale * B @ A`` into every layer and pushing the whole model after each update,
the engine gets the base weights once and then, after each update, only the adapter, which vLLM
loads in place (``load_inplace``) under one fixed adapter id and applies per request. What
vLLM cannot apply (DoRA, ``modules_to_save``, adapters on embeddings or the output head, rank
or alpha patterns, several adapters) goes the merged way: ``auto`` falls back to it and says
why, ``adapter`` refuses the run. On a CPU ``auto`` merges too: vLLM's CPU LoRA ops copy the
adapter's matrices for every token they apply it to, which makes generation many times slower
than the sync saves (``bench/weight_sync.py``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from rlvr._builtin import adapter_weights, is_peft, unwrap_model
from rlvr.plugin import PluginError

logger = logging.getLogger(__name__)

#: the adapter's name in vLLM (a server's ``model`` field of a request) and its fixed id
ADAPTER_NAME = "rlvr-policy-lora"
ADAPTER_ID = 1
CPU_REASON = (
    "on a CPU vLLM's LoRA ops make generation many times slower than merging saves "
    "(bench/weight_sync.py); lora_sync: adapter forces it"
)
#: the ranks vLLM's ``max_lora_rank`` accepts (vllm.config.lora.MaxLoRARanks)
VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


@dataclass(frozen=True)
class EngineLora:
    """How a policy's adapter goes to vLLM: its ``max_lora_rank``."""

    max_rank: int

    def engine_kwargs(self) -> dict[str, Any]:
        """The ``LLM(...)`` arguments that make room for the adapter."""
        return {"enable_lora": True, "max_lora_rank": self.max_rank, "max_loras": 1}

    def server_args(self) -> list[str]:
        """The same, as ``vllm serve`` flags."""
        return ["--enable-lora", "--max-lora-rank", str(self.max_rank), "--max-loras", "1"]

    @staticmethod
    def write(model: Any, directory: Path) -> None:
        """The policy's adapter as peft saves it (``adapter_config.json`` and
        ``adapter_model.safetensors``), which is what vLLM loads."""
        directory.mkdir(parents=True, exist_ok=True)
        peft_model = unwrap_model(model)
        config = peft_model.peft_config[peft_model.active_adapter].to_dict()
        config["target_modules"] = sorted(config.get("target_modules") or [])
        (directory / "adapter_config.json").write_text(json.dumps(config, default=str))
        save_file(adapter_weights(model), str(directory / "adapter_model.safetensors"))


class AdapterDir:
    """Where vLLM loads the policy's adapter from: one directory for the run, in ``parent``
    (/dev/shm where there is one: never on a disk), rewritten after each update."""

    def __init__(self, parent: str | None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="rlvr-adapter-", dir=parent)
        self.path = Path(self._tmp.name)

    def write(self, model: Any) -> Path:
        """The policy's adapter, as it is now; returns the directory."""
        EngineLora.write(model, self.path)
        return self.path

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._tmp.cleanup()


def engine_lora(model: Any, mode: str, device: str) -> EngineLora | None:
    """The adapter way for ``model`` (``lora_sync`` ``auto``/``adapter``), or None for the
    merged way (a plain model, ``merged``, or under ``auto`` what vLLM cannot apply or a CPU
    ``device``)."""
    model = unwrap_model(model)
    if mode == "merged" or not is_peft(model):
        return None
    why = _unsupported(model)
    if why is None and mode == "auto" and device == "cpu":
        why = CPU_REASON
    if why is None:
        rank = int(model.peft_config[model.active_adapter].r)
        return EngineLora(next(r for r in VLLM_RANKS if r >= rank))
    if mode == "adapter":
        raise PluginError(
            f"backend.params.lora_sync: adapter: vLLM cannot apply this adapter itself ({why}); "
            "set lora_sync: merged (or auto) to push merged weights instead"
        )
    logger.info("vLLM gets merged weights after each update: %s", why)
    return None


def _unsupported(model: Any) -> str | None:
    """Why vLLM cannot apply the policy's adapter itself, or None."""
    if len(model.peft_config) != 1:
        return "the policy has several adapters"
    config = next(iter(model.peft_config.values()))
    if str(getattr(config, "peft_type", "")) not in {"LORA", "PeftType.LORA"}:
        return f"the adapter is {config.peft_type}, not LoRA"
    if getattr(config, "use_dora", False):
        return "DoRA adapters"
    if config.modules_to_save:
        return "modules_to_save (whole trained copies of layers)"
    if getattr(config, "rank_pattern", None) or getattr(config, "alpha_pattern", None):
        return "rank_pattern / alpha_pattern"
    if int(config.r) > VLLM_RANKS[-1]:
        return f"rank {config.r} (vLLM takes at most {VLLM_RANKS[-1]})"
    base = model.get_base_model()
    output = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    for name, module in base.named_modules():
        if not hasattr(module, "lora_A"):
            continue
        layer = getattr(module, "base_layer", None)
        if not isinstance(layer, torch.nn.Linear) or layer is output:
            return f"an adapter on {name} (vLLM applies adapters to inner linear layers only)"
    return None


__all__ = ["ADAPTER_ID", "ADAPTER_NAME", "AdapterDir", "EngineLora", "engine_lora"]
