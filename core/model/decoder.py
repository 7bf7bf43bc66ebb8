"""A causal language model taken apart: its decoder body and output head where the head can be
applied outside the model's forward (:func:`fusable_head`), the body's inputs for a prompt +
completion pass, and running the body in parts (what a layer receives; the top layers from a
hidden state). What :mod:`rlvr.model.logprobs` and :mod:`rlvr.model.packing` build on."""

from __future__ import annotations

from typing import Any

import torch

from rlvr.parallel.distributed import fsdp_modules

#: Model types whose causal-LM head is exactly ``logits = lm_head(decoder(...).last_hidden_state)``
#: (no logit soft-capping or scaling), so the head can be fused into the log-probabilities.
_FUSABLE_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "smollm3", "phi3"})


def fusable_head(model: Any) -> tuple[Any, torch.nn.Linear] | None:
    """``(decoder body, lm_head)`` when the head can be applied outside the model's forward.

    None (use the model's own forward) for: wrappers whose forward must run (DDP; FSDP2, whose
    root forward gathers the embedding and head), a LoRA-adapted or otherwise non-Linear head,
    and model types not known to compute plain ``lm_head(hidden)`` logits.
    """
    if isinstance(model, torch.nn.parallel.DistributedDataParallel) or fsdp_modules(model):
        return None
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft
    config = getattr(base, "config", None)
    if getattr(config, "model_type", None) not in _FUSABLE_MODEL_TYPES:
        return None
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    body = base.get_decoder() if hasattr(base, "get_decoder") else None
    if type(head) is not torch.nn.Linear or body is None:
        return None
    return body, head


class _Stop(Exception):
    """Ends a forward pass at the layer whose inputs were wanted."""


def forward_kwargs(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> dict[str, Any]:
    """One forward pass over prompt + completion, positions counted from the mask."""
    attention_mask = torch.cat([prompt_mask, completion_mask], dim=1).long()
    return {
        "input_ids": torch.cat([prompt_ids, completion_ids], dim=1),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "use_cache": False,
    }


def decoder_layers(body: Any) -> torch.nn.ModuleList | None:
    """The body's decoder layers in order (None: it has no ``layers`` list to run in parts)."""
    layers = getattr(body, "layers", None)
    return layers if isinstance(layers, torch.nn.ModuleList) and len(layers) else None


def layer_inputs(
    body: Any, layer: torch.nn.Module, kwargs: dict[str, Any]
) -> tuple[torch.Tensor, tuple, dict[str, Any]]:
    """What ``body``'s forward passes to ``layer`` (hidden states, other positional and keyword
    arguments: masks, rotary embeddings); no layer from ``layer`` on runs."""
    seen: dict[str, Any] = {}

    def hook(module: Any, args: tuple, kw: dict[str, Any]) -> None:
        kw = dict(kw)
        seen["call"] = (args[0], args[1:], kw) if args else (kw.pop("hidden_states"), (), kw)
        raise _Stop

    handle = layer.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        body(**kwargs)
    except _Stop:
        pass
    finally:
        handle.remove()
    return seen["call"]


def top_layers(body: Any, kwargs: dict[str, Any], k: int, hidden: torch.Tensor) -> torch.Tensor:
    """The body's last hidden states (after its final norm), from ``hidden`` entering layer
    ``k``. The masks and positions come from the body's own forward, stopped before layer 0."""
    layers = decoder_layers(body)
    assert layers is not None
    _, args, kw = layer_inputs(body, layers[0], kwargs)
    for layer in layers[k:]:
        out = layer(hidden, *args, **kw)
        hidden = out[0] if isinstance(out, tuple) else out
    return body.norm(hidden)


__all__ = ["decoder_layers", "forward_kwargs", "fusable_head", "layer_inputs", "top_layers"]
