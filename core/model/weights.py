"""Export a training model's weights for an inference engine, LoRA adapters merged in.

Generic over engines: a backend that keeps its own copy of the policy (vLLM, or a third-party
one) pushes :func:`hf_weights` into it after each update. FSDP2-sharded parameters are
gathered one tensor at a time as the engine consumes them. The model may be wrapped (DDP,
accelerate, ``torch.compile``) or a peft LoRA model: the engine gets plain Hugging Face names
and merged weights, or, when it applies LoRA adapters itself, the base weights once
(``merge_lora=False``) and then the adapter alone (:func:`adapter_weights`), a few MB instead
of the whole model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


def unwrap_model(model: Any) -> Any:
    """The model inside DDP/accelerate (``.module``) and torch.compile (``._orig_mod``)."""
    while True:
        inner = getattr(model, "module", None)
        if inner is None:
            inner = getattr(model, "_orig_mod", None)
        if inner is None or inner is model:
            return model
        model = inner


def is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def tied_embeddings(model: Any) -> bool:
    config = getattr(model, "config", None)
    if config is None:
        return False
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return bool(getattr(text, "tie_word_embeddings", False))


def hf_weights(model: Any, *, merge_lora: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """``(Hugging Face name, tensor)`` of every weight the inference engine needs.

    Plain models: the ``state_dict``. With tied embeddings ``lm_head.weight`` is always included
    (added from the input embeddings if the state dict lacks it): vLLM's in-place reload
    otherwise puts the *old* ``lm_head`` back over the tie. peft LoRA models: the base model's
    names and merged weights (``W + delta`` per LoRA layer, delta from peft's
    ``get_delta_weight`` over the active, unmerged adapters), no adapter tensors;
    ``modules_to_save`` copies replace their originals; ``merge_lora=False``: the base weights
    as they are, for an engine that applies the adapter itself. Tensors are detached and may
    share storage with the model's parameters: consume them before the next optimizer step.
    """
    model = unwrap_model(model)
    base = model.get_base_model() if is_peft(model) else model
    names = set()
    embedding = base.get_input_embeddings() if hasattr(base, "get_input_embeddings") else None
    weights = _merged_weights(model, merge_lora) if is_peft(model) else _plain_weights(model)
    for name, tensor in weights:
        names.add(name)
        yield name, tensor
    if tied_embeddings(base) and "lm_head.weight" not in names and embedding is not None:
        yield "lm_head.weight", _whole(embedding.weight.detach())


def _plain_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    for name, tensor in model.state_dict().items():
        yield name.replace("._orig_mod.", "."), _whole(tensor.detach())


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded (FSDP2 ``DTensor``) parameter gathered whole, one at a time, so a rank never
    holds more than one whole tensor beside its shards (an all-gather: every rank must
    consume the weights, in the same order)."""
    full_tensor = getattr(tensor, "full_tensor", None)
    return full_tensor() if callable(full_tensor) else tensor


def _merged_weights(model: Any, merge: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
    """A peft model's weights under the base model's names, LoRA deltas merged in (``merge``)."""
    base = model.get_base_model()
    tied = tied_embeddings(base)
    embedding = base.get_input_embeddings() if hasattr(base, "get_input_embeddings") else None
    lora_layers = {
        name: module
        for name, module in base.named_modules()
        if hasattr(module, "base_layer") and hasattr(module, "get_delta_weight")
    }
    with torch.no_grad():
        for name, tensor in base.state_dict().items():
            if ".lora_" in name or ".original_module." in name:
                continue
            if ".modules_to_save." in name:
                # "<mod>.modules_to_save.<adapter>.<param>" -> "<mod>.<param>"
                head, _, rest = name.partition(".modules_to_save.")
                name = f"{head}.{rest.partition('.')[2]}"
            module_name, _, param = name.rpartition(".")
            owner = module_name.removesuffix(".base_layer")
            hf_name = f"{owner}.{param}" if owner else param
            layer = lora_layers.get(owner)
            if (
                merge
                and layer is not None
                and param == "weight"
                and module_name.endswith(".base_layer")
            ):
                delta = _lora_delta(layer)
                if delta is not None:
                    if tied and layer is embedding:
                        raise NotImplementedError(
                            "LoRA on tied input embeddings cannot be synced to vLLM: its lm_head "
                            "is the embedding matrix, which the adapter does not change in the "
                            "training model; leave the embeddings out of target_modules"
                        )
                    yield hf_name, tensor.detach() + delta.to(tensor.dtype)
                    continue
            yield hf_name, tensor.detach()


def adapter_weights(model: Any) -> dict[str, torch.Tensor]:
    """A peft model's active adapter as peft saves it (``adapter_model.safetensors``' names,
    e.g. ``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight``), gathered whole
    and copied, so it may be written while the next update runs."""
    from peft import get_peft_model_state_dict  # optional extra (rlvr[lora]): LoRA runs only

    model = unwrap_model(model)
    with torch.no_grad():
        state = get_peft_model_state_dict(model, adapter_name=model.active_adapter)
        return {name: _whole(t.detach()).clone().contiguous() for name, t in state.items()}


def _lora_delta(layer: Any) -> torch.Tensor | None:
    """Sum of the active, unmerged adapters' ``get_delta_weight`` of a peft LoRA layer."""
    if getattr(layer, "merged", False) or getattr(layer, "disable_adapters", False):
        return None
    dora = getattr(layer, "use_dora", {}) or {}
    active = [
        a
        for a in layer.active_adapters
        if a in getattr(layer, "lora_A", {}) or a in getattr(layer, "lora_embedding_A", {})
    ]
    if any(dora.get(a, False) for a in active):
        raise NotImplementedError("the vllm backend cannot merge DoRA adapters")
    delta = None
    for adapter in active:
        d = layer.get_delta_weight(adapter)
        delta = d if delta is None else delta + d
    return delta


__all__ = ["adapter_weights", "hf_weights", "is_peft", "tied_embeddings", "unwrap_model"]
