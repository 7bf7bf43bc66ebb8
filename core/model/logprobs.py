"""Scoring completions with the policy: per-token log-probabilities (and entropies) of the
sampled tokens, the numbers every loss starts from, computed lean.

- :func:`completion_logprobs` gives them in one forward pass without materialising a float32
  ``[N, T, V]`` tensor for the whole batch: the output head is applied in chunks to completion
  tokens only (:class:`FusedHeadLogProbs`), or the model's logits are reduced chunk by chunk.
- :func:`shared_layers` / :func:`prefix_hidden`: with LoRA on the top layers only, the layers
  below run once per batch and later passes start from their output (``prefix=``).
- :func:`packs_prompts`: completions of one prompt run as one sequence, the prompt once
  (a group's prompt is most of its tokens on short completions).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from rlvr.model.chunked_logprobs import ChunkedLogProbs, FusedHeadLogProbs
from rlvr.model.decoder import (
    decoder_layers,
    forward_kwargs,
    fusable_head,
    layer_inputs,
    top_layers,
)
from rlvr.model.packing import Packing, packable, plan_packing

# --------------------------------------------------------------------------- log-probabilities


def _forward_params(model: Any) -> set[str]:
    inner = getattr(model, "module", model)  # DDP / accelerate wrappers
    try:
        return set(inspect.signature(inner.forward).parameters)
    except (TypeError, ValueError):
        return set()


#: Logit elements per chunk of the fused head (128 MiB of float32): 682 tokens at SmolLM2's
#: 49k vocabulary, 221 at a 151k one.
_CHUNK_ELEMENTS = 2**25


def _fused_logprobs(
    fused: tuple[Any, torch.nn.Linear],
    kwargs: dict[str, Any],
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float,
    chunk_tokens: int | None,
    with_entropy: bool,
    prefix: tuple[int, torch.Tensor] | None = None,
    packing: Packing | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`completion_logprobs` through the decoder body and :class:`FusedHeadLogProbs`;
    with ``packing``, over the packed sequences (:func:`plan_packing`) instead of the rows."""
    body, head = fused
    n, t = completion_ids.shape
    if packing is not None:
        kwargs = packing.kwargs
        if prefix is not None:  # the rows' hidden states, laid out as the packed sequences
            k, rows = prefix
            prefix = (k, rows.flatten(0, 1)[packing.source].view(*packing.shape, -1))
    if prefix is None:
        hidden = body(**kwargs).last_hidden_state
    else:
        hidden = top_layers(body, kwargs, *prefix)
    valid = completion_mask.bool()
    if packing is None:
        scored = hidden[:, -t - 1 : -1][valid]  # position j scores token j + 1
    else:
        scored = hidden.flatten(0, 1)[packing.scored]
    device_type = scored.device.type
    compute_dtype = (
        torch.get_autocast_dtype(device_type)
        if torch.is_autocast_enabled(device_type)
        else head.weight.dtype
    )
    vocab = head.weight.shape[0]
    chunk = chunk_tokens if chunk_tokens is not None else max(1, _CHUNK_ELEMENTS // vocab)
    if chunk < 1:
        raise ValueError("chunk_tokens must be >= 1")
    with torch.autocast(device_type, enabled=False):
        logp_v, entropy_v = FusedHeadLogProbs.apply(
            scored,
            head.weight,
            head.bias,
            completion_ids[valid],
            float(temperature),
            int(chunk),
            bool(with_entropy),
            compute_dtype,
        )
    logp = logp_v.new_zeros(n, t).float().masked_scatter(valid, logp_v.float())
    if not with_entropy:
        return logp, None
    return logp, entropy_v.new_zeros(n, t).float().masked_scatter(valid, entropy_v.float())


# --------------------------------------------------------------------------- shared layers
# With LoRA on the top layers only (``layers_to_transform``), the bottom layers compute the
# same thing for the policy, for its base with the adapters off (the reference) and before and
# after an update: the trainer's no-grad pass computes their output once per batch
# (:func:`prefix_hidden`) and every later pass starts from it (``prefix=``).


def _adapter_types() -> tuple[type, ...]:
    try:  # optional extra (rlvr[lora]): without peft no model has adapters
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:
        return ()
    return (BaseTunerLayer,)


def shared_layers(model: Any) -> int:
    """How many bottom decoder layers have no adapter and no trainable weight (nor have the
    embeddings): their output is the policy's, the adapters-off reference's, and the same
    after an update. 0 where the head is not fusable (:func:`fusable_head`), the body has no
    ``layers``/``norm``, or its layers see different attention masks (sliding-window ones)."""
    fused = fusable_head(model)
    if fused is None:
        return 0
    body = fused[0]
    layers = decoder_layers(body)
    types = getattr(getattr(body, "config", None), "layer_types", None) or []
    if layers is None or not hasattr(body, "norm") or len(set(types)) > 1:
        return 0
    adapters = _adapter_types()

    def changes(module: torch.nn.Module) -> bool:
        return any(p.requires_grad for p in module.parameters()) or any(
            isinstance(m, adapters) for m in module.modules()
        )

    if changes(body.get_input_embeddings()):
        return 0
    for i, layer in enumerate(layers):
        if changes(layer):
            return i
    return 0  # nothing in the body trains: nothing to share a pass with


def prefix_hidden(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    k: int,
    *,
    pack: bool = True,
) -> torch.Tensor:
    """The hidden states entering decoder layer ``k`` (``[N, P + T, H]``; shapes as in
    :func:`completion_logprobs`), for ``completion_logprobs(..., prefix=(k, hidden))``; with
    ``pack``, computed on packed prompts as there (the rows' layout either way)."""
    fused = fusable_head(model)
    body = fused[0] if fused is not None else None
    layers = decoder_layers(body)
    if layers is None or not 0 < k < len(layers):
        raise ValueError(f"no decoder layer {k} to stop at (see shared_layers)")
    device = prompt_ids.device
    completion_ids, completion_mask = completion_ids.to(device), completion_mask.to(device)
    args = (prompt_ids, prompt_mask, completion_ids, completion_mask)
    packing = plan_packing(body, *args) if pack else None
    if packing is None:
        return layer_inputs(body, layers[k], forward_kwargs(*args))[0]
    packed = layer_inputs(body, layers[k], packing.kwargs)[0]  # [B, L, H]
    return packed.flatten(0, 1)[packing.target].view(prompt_ids.shape[0], -1, packed.shape[-1])


def packs_prompts(model: Any) -> bool:
    """Whether :func:`completion_logprobs` packs the rows of ``model`` that share a prompt:
    a fusable head (:func:`fusable_head`), an attention implementation that takes a custom
    mask (``sdpa``, ``eager``), full attention in every layer. It then still packs only a batch
    where that is less work (see :func:`plan_packing`)."""
    fused = fusable_head(model)
    return fused is not None and packable(fused[0])


def completion_logprobs(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = 8,
    with_entropy: bool = False,
    fuse_head: bool = True,
    chunk_tokens: int | None = None,
    prefix: tuple[int, torch.Tensor] | None = None,
    pack: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probabilities ``[N, T]`` (float32) of ``completion_ids`` under ``model``.

    ``prompt_ids``/``prompt_mask`` are ``[N, P]`` left-padded, ``completion_ids``/
    ``completion_mask`` ``[N, T]`` right-padded. One forward pass over the concatenation, with
    position ids counted from the attention mask; only the logits of the ``T + 1`` last
    positions are computed (``logits_to_keep``). The logits are divided by ``temperature`` (as
    the sampler did) and normalised ``chunk_size`` rows at a time in float32, in the forward
    and in the backward pass (a custom autograd function that keeps only the model's logits
    and ``[N, T]`` statistics), so no float32 ``[N, T, V]`` tensor is ever materialised for
    the whole batch. Positions where
    ``completion_mask`` is 0 are 0. Returns ``(logp, entropy)``; ``entropy`` (of the
    temperature-scaled distribution) is None unless ``with_entropy``. Differentiable when
    called with gradients enabled.

    With ``fuse_head`` (default) and a model whose head allows it (see :func:`fusable_head`:
    plain ``nn.Linear`` head, known model type, no DDP/FSDP wrapper), the model's decoder body
    runs alone and the head is applied inside the chunked function to the scored tokens only
    (``chunk_tokens`` at a time; default: 128 MiB of float32 logits), so no logits tensor of
    the batch exists at all and padding tokens cost no head matmul. Otherwise the model's own
    forward gives the last ``T + 1`` positions' logits, normalised ``chunk_size`` rows at a time.

    ``prefix=(k, hidden)``: ``hidden`` (``[N, P + T, H]``, from :func:`prefix_hidden`) is what
    enters decoder layer ``k``, so only layers ``k`` and up run. Only the caller knows the
    bottom layers did not change since ``hidden`` was computed: ``k <= shared_layers(model)``
    then and now.

    ``pack`` (default): on the fused path, rows with equal prompts (a group's completions) run
    as one sequence with the prompt once, where :func:`packs_prompts` allows it and that is
    less work (:func:`plan_packing`); the results are the rows' own, up to float rounding.
    """
    if temperature <= 0:
        raise ValueError("temperature must be > 0 (use 1.0 for greedy-sampled completions)")
    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    n, t = completion_ids.shape
    device = prompt_ids.device
    completion_ids = completion_ids.to(device)
    completion_mask = completion_mask.to(device)
    kwargs = forward_kwargs(prompt_ids, prompt_mask, completion_ids, completion_mask)
    fused = fusable_head(model) if fuse_head or prefix is not None else None
    if prefix is not None and fused is None:
        raise ValueError("prefix needs a model whose head is fusable (see shared_layers)")
    if fused is not None:
        packing = (
            plan_packing(fused[0], prompt_ids, prompt_mask, completion_ids, completion_mask)
            if pack
            else None
        )
        return _fused_logprobs(
            fused,
            kwargs,
            completion_ids,
            completion_mask,
            temperature,
            chunk_tokens,
            with_entropy,
            prefix,
            packing,
        )
    params = _forward_params(model)
    if "logits_to_keep" in params:
        kwargs["logits_to_keep"] = t + 1
    elif "num_logits_to_keep" in params:
        kwargs["num_logits_to_keep"] = t + 1
    logits = model(**kwargs).logits
    # Position j predicts token j + 1: the T logits before the last one score the completion.
    logp, entropy = ChunkedLogProbs.apply(
        logits, completion_ids, float(temperature), int(chunk_size), bool(with_entropy)
    )
    valid = completion_mask.bool()
    logp = torch.where(valid, logp, 0.0).float()
    return logp, (torch.where(valid, entropy, 0.0).float() if with_entropy else None)


__all__ = ["completion_logprobs", "packs_prompts", "prefix_hidden", "shared_layers"]
