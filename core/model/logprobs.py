"""Scoring completions with the policy: per-token log-probabilities (and entropies) of the
sampled tokens, the numbers every loss starts from, computed lean.

- :func:`completion_logprobs` gives them in one forward pass without materialising a float32
  ``[N, T, V]`` tensor for the whole batch: the output head is applied in chunks to completion
  tokens only (:class:`_FusedHeadLogProbs`), or the model's logits are reduced chunk by chunk.
- :func:`shared_layers` / :func:`prefix_hidden`: with LoRA on the top layers only, the layers
  below run once per batch and later passes start from their output (``prefix=``).
- :func:`packs_prompts`: completions of one prompt run as one sequence, the prompt once
  (a group's prompt is most of its tokens on short completions).
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

import torch

from rlvr.parallel.distributed import fsdp_modules

# --------------------------------------------------------------------------- log-probabilities


def _forward_params(model: Any) -> set[str]:
    inner = getattr(model, "module", model)  # DDP / accelerate wrappers
    try:
        return set(inspect.signature(inner.forward).parameters)
    except (TypeError, ValueError):
        return set()


def _compute_dtype(logits: torch.Tensor) -> torch.dtype:
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


def _token_stats(
    x: torch.Tensor, ids: torch.Tensor, with_entropy: bool, *, overwrite: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """``(logsumexp, log-prob of ids, entropy or None)`` over the last dim of scaled logits;
    ``overwrite`` lets the entropy's work reuse ``x``'s memory (only for a tensor we own)."""
    lse = torch.logsumexp(x, dim=-1)
    logp = x.gather(-1, ids.unsqueeze(-1)).squeeze(-1) - lse
    if not with_entropy:
        return lse, logp, None
    log_p = x.sub_(lse.unsqueeze(-1)) if overwrite else x - lse.unsqueeze(-1)
    return lse, logp, log_p.exp().mul_(log_p).sum(-1).neg_()  # H = -sum_j p_j log p_j


def _scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """``logits / temperature`` in float32 (float64 stays float64); may be a view of
    ``logits``, so never write into it."""
    x = logits.to(_compute_dtype(logits))
    return x / temperature if temperature != 1.0 else x


class _ChunkedLogProbs(torch.autograd.Function):
    """Log-probabilities and entropies of ``ids`` ``[N, T]`` from ``logits`` ``[N, L, V]``
    (positions ``L - T - 1 .. L - 2`` score the ``T`` tokens), ``chunk_size`` rows at a time.

    Forward and backward both work chunk by chunk in float32 and save only ``logits`` (which
    the model's graph keeps anyway) and ``[N, T]`` statistics, so the extra memory is one
    chunk's ``[c, T, V]`` temporaries, never a float32 ``[N, T, V]`` tensor. The gradient is
    written straight into one ``logits``-shaped tensor (no per-chunk full-size copies).
    """

    @staticmethod
    def forward(ctx, logits, ids, temperature, chunk_size, with_entropy):
        ctx.set_materialize_grads(False)  # an unused entropy costs no gradient work
        n, length, _ = logits.shape
        t = ids.shape[1]
        first = length - t - 1
        logp = torch.empty((n, t), dtype=_compute_dtype(logits), device=logits.device)
        lse = torch.empty_like(logp)
        entropy = torch.zeros_like(logp)
        for start in range(0, n, chunk_size):
            rows = slice(start, start + chunk_size)
            x = _scaled(logits[rows, first : first + t], temperature)
            lse[rows], logp[rows], ent = _token_stats(x, ids[rows], with_entropy)
            if ent is not None:
                entropy[rows] = ent
        ctx.save_for_backward(logits, ids, lse, entropy)
        ctx.temperature, ctx.chunk_size, ctx.with_entropy = temperature, chunk_size, with_entropy
        if not with_entropy:
            ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logp, grad_entropy):
        logits, ids, lse, entropy = ctx.saved_tensors
        temperature, chunk_size = ctx.temperature, ctx.chunk_size
        use_entropy = ctx.with_entropy and grad_entropy is not None
        n, length, _ = logits.shape
        t = ids.shape[1]
        first = length - t - 1
        grad = torch.empty_like(logits)
        grad[:, :first].zero_()
        grad[:, first + t :].zero_()
        if grad_logp is None:
            grad_logp = torch.zeros_like(lse)
        for start in range(0, n, chunk_size):
            rows = slice(start, start + chunk_size)
            x = _scaled(logits[rows, first : first + t], temperature)
            lse_c = lse[rows].unsqueeze(-1)
            g = grad_logp[rows].unsqueeze(-1).to(x.dtype)
            if use_entropy or x.data_ptr() == logits.data_ptr() or x._base is not None:
                p = (x - lse_c).exp_()
            else:  # x is a temporary copy: reuse its memory
                p = x.sub_(lse_c).exp_()
            if use_entropy:
                # dH/dx_j = -p_j (x_j - lse + H)
                h = entropy[rows].unsqueeze(-1)
                ge = grad_entropy[rows].unsqueeze(-1).to(x.dtype)
                gx = p * ((x - lse_c + h) * -ge - g)
            else:
                gx = p.mul_(-g)
            # d logp / dx_j = [j == id] - p_j
            gx.scatter_add_(-1, ids[rows].unsqueeze(-1), g)
            if temperature != 1.0:
                gx.div_(temperature)
            grad[rows, first : first + t] = gx
        return grad, None, None, None, None


#: Model types whose causal-LM head is exactly ``logits = lm_head(decoder(...).last_hidden_state)``
#: (no logit soft-capping or scaling), so the head can be fused into the log-probabilities.
_FUSABLE_MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3", "smollm3", "phi3"})

#: Logit elements per chunk of the fused head (128 MiB of float32): 682 tokens at SmolLM2's
#: 49k vocabulary, 221 at a 151k one.
_CHUNK_ELEMENTS = 2**25


def _fusable_head(model: Any) -> tuple[Any, torch.nn.Linear] | None:
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


@functools.cache
def _mm_accumulates_in_float32(device_type: str, dtype: torch.dtype) -> bool:
    """Whether ``torch.addmm(..., out_dtype=torch.float32)`` takes ``dtype`` inputs on this
    device (CUDA, torch >= 2.8): a 16-bit GEMM summed straight into a float32 accumulator."""
    try:
        a, acc = (
            torch.ones(2, 2, dtype=dtype, device=device_type),
            torch.ones(2, 2, device=device_type),
        )
        torch.addmm(acc, a, a, out_dtype=torch.float32, out=acc)  # the form the backward uses
        if acc[0, 0].item() != 3.0:
            return False
    except (NotImplementedError, RuntimeError, TypeError):
        return False
    return True


class _FusedHeadLogProbs(torch.autograd.Function):
    """Log-probabilities and entropies of ``ids`` ``[M]`` from hidden states ``[M, H]`` and the
    head's ``weight`` ``[V, H]`` (and ``bias``), ``chunk`` tokens at a time.

    The logits exist only one chunk at a time, in the forward and again (recomputed) in the
    backward, which returns the gradients of the hidden states and of the head's weight (a tied
    embedding's gradient then accumulates through autograd as usual). The matmuls run in
    ``compute_dtype`` (autocast's dtype, else the weight's); the softmax statistics in float32
    (float64 stays float64), in place in the chunk's own float32 logits. Memory: about two
    ``[chunk, V]`` float32 tensors at a time (one when no loss term uses the entropy), never
    ``[N, T, V]`` logits or their gradient, and no ``[V, H]`` temporaries: the weight's gradient
    is summed in float32 straight from each chunk's product (with 16-bit compute: by
    ``addmm(out_dtype=float32)`` where the device has it, else a float32 matmul), never rounded
    to 16 bits chunk by chunk.
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, ids, temperature, chunk, with_entropy, compute_dtype):
        # An output no loss term uses gets None in the backward, not zeros (the entropy is
        # usually computed for logging only): its gradient work is skipped.
        ctx.set_materialize_grads(False)
        stat_dtype = torch.float64 if weight.dtype == torch.float64 else torch.float32
        m = hidden.shape[0]
        logp = torch.empty(m, dtype=stat_dtype, device=hidden.device)
        lse = torch.empty_like(logp)
        entropy = torch.zeros_like(logp)
        w = weight.to(compute_dtype)
        b = None if bias is None else bias.to(compute_dtype)
        for start in range(0, m, chunk):
            rows = slice(start, start + chunk)
            # A fresh tensor (the matmul's output or its float32 copy): ours to write into.
            x = _scaled(
                torch.nn.functional.linear(hidden[rows].to(compute_dtype), w, b), temperature
            )
            lse[rows], logp[rows], ent = _token_stats(x, ids[rows], with_entropy, overwrite=True)
            if ent is not None:
                entropy[rows] = ent
            del x, ent  # before the next chunk's logits exist, not after
        ctx.save_for_backward(hidden, weight, bias, ids, lse, entropy)
        ctx.args = (temperature, chunk, compute_dtype)
        if not with_entropy:
            ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, bias, ids, lse, entropy = ctx.saved_tensors
        temperature, chunk, compute_dtype = ctx.args
        if grad_logp is None:
            grad_logp = torch.zeros_like(lse)
        w = weight.to(compute_dtype)
        b = None if bias is None else bias.to(compute_dtype)
        acc = torch.float64 if weight.dtype == torch.float64 else torch.float32
        out_dtype_mm = compute_dtype != acc and _mm_accumulates_in_float32(
            weight.device.type, compute_dtype
        )
        # A frozen head (LoRA adapts the layers below it) gets no [V, H] gradient at all.
        _, want_weight, want_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.empty_like(hidden)
        grad_weight = (
            torch.zeros(weight.shape, dtype=acc, device=weight.device) if want_weight else None
        )
        grad_bias = torch.zeros(bias.shape, dtype=acc, device=bias.device) if want_bias else None
        for start in range(0, hidden.shape[0], chunk):
            rows = slice(start, start + chunk)
            h = hidden[rows].to(compute_dtype)
            x = _scaled(torch.nn.functional.linear(h, w, b), temperature)  # fresh: ours
            logp = x.sub_(lse[rows].unsqueeze(-1))
            g = grad_logp[rows].unsqueeze(-1).to(x.dtype)
            if grad_entropy is None:  # d logp / dx_j = [j == id] - p_j
                gx = logp.exp_().mul_(-g)
            else:  # and dH/dx_j = -p_j (log p_j + H)
                p = logp.exp()
                ge = grad_entropy[rows].unsqueeze(-1).to(x.dtype)
                gx = logp.add_(entropy[rows].unsqueeze(-1)).mul_(-ge).sub_(g).mul_(p)
                del p
            gx.scatter_add_(-1, ids[rows].unsqueeze(-1), g)
            if temperature != 1.0:
                gx.div_(temperature)
            low = gx.to(compute_dtype)  # gx itself when the compute dtype is float32
            grad_hidden[rows] = (low @ w).to(hidden.dtype)
            if grad_weight is not None:
                if compute_dtype == acc:
                    grad_weight.addmm_(gx.t(), h)
                elif out_dtype_mm:
                    torch.addmm(grad_weight, low.t(), h, out_dtype=acc, out=grad_weight)
                else:
                    grad_weight.addmm_(gx.t(), hidden[rows].to(acc))
            if grad_bias is not None:
                grad_bias += gx.sum(0).to(acc)
            del x, logp, gx, low  # before the next chunk's logits exist, not after
        grad_weight = None if grad_weight is None else grad_weight.to(weight.dtype)
        grad_bias = None if grad_bias is None else grad_bias.to(bias.dtype)
        return grad_hidden, grad_weight, grad_bias, None, None, None, None, None


def _fused_logprobs(
    fused: tuple[Any, torch.nn.Linear],
    kwargs: dict[str, Any],
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float,
    chunk_tokens: int | None,
    with_entropy: bool,
    prefix: tuple[int, torch.Tensor] | None = None,
    packing: _Packing | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`completion_logprobs` through the decoder body and :class:`_FusedHeadLogProbs`;
    with ``packing``, over the packed sequences (:func:`_pack`) instead of the rows."""
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
        hidden = _top_layers(body, kwargs, *prefix)
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
        logp_v, entropy_v = _FusedHeadLogProbs.apply(
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


class _Stop(Exception):
    """Ends a forward pass at the layer whose inputs were wanted."""


def _forward_kwargs(
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


def _decoder_layers(body: Any) -> torch.nn.ModuleList | None:
    layers = getattr(body, "layers", None)
    return layers if isinstance(layers, torch.nn.ModuleList) and len(layers) else None


def _layer_inputs(
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


def _top_layers(body: Any, kwargs: dict[str, Any], k: int, hidden: torch.Tensor) -> torch.Tensor:
    """The body's last hidden states (after its final norm), from ``hidden`` entering layer
    ``k``. The masks and positions come from the body's own forward, stopped before layer 0."""
    layers = _decoder_layers(body)
    assert layers is not None
    _, args, kw = _layer_inputs(body, layers[0], kwargs)
    for layer in layers[k:]:
        out = layer(hidden, *args, **kw)
        hidden = out[0] if isinstance(out, tuple) else out
    return body.norm(hidden)


def _adapter_types() -> tuple[type, ...]:
    try:  # optional extra (rlvr[lora]): without peft no model has adapters
        from peft.tuners.tuners_utils import BaseTunerLayer
    except ImportError:
        return ()
    return (BaseTunerLayer,)


def shared_layers(model: Any) -> int:
    """How many bottom decoder layers have no adapter and no trainable weight (nor have the
    embeddings): their output is the policy's, the adapters-off reference's, and the same
    after an update. 0 where the head is not fusable (:func:`_fusable_head`), the body has no
    ``layers``/``norm``, or its layers see different attention masks (sliding-window ones)."""
    fused = _fusable_head(model)
    if fused is None:
        return 0
    body = fused[0]
    layers = _decoder_layers(body)
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
    fused = _fusable_head(model)
    body = fused[0] if fused is not None else None
    layers = _decoder_layers(body)
    if layers is None or not 0 < k < len(layers):
        raise ValueError(f"no decoder layer {k} to stop at (see shared_layers)")
    device = prompt_ids.device
    completion_ids, completion_mask = completion_ids.to(device), completion_mask.to(device)
    args = (prompt_ids, prompt_mask, completion_ids, completion_mask)
    packing = _pack(body, *args) if pack else None
    if packing is None:
        return _layer_inputs(body, layers[k], _forward_kwargs(*args))[0]
    packed = _layer_inputs(body, layers[k], packing.kwargs)[0]  # [B, L, H]
    return packed.flatten(0, 1)[packing.target].view(prompt_ids.shape[0], -1, packed.shape[-1])


# --------------------------------------------------------------------------- shared prompts
# A group's completions share one prompt, which row by row every pass computes once per
# completion (in the example the prompt is over half of a row's tokens). Packed, a group is one
# sequence, its prompt and then each completion, under an attention mask that lets a completion
# see the prompt and its own earlier tokens only, with positions that restart after the prompt
# for each completion: every completion token gets the hidden state its own row would give.

#: Attention implementations that take a custom ``[B, 1, L, L]`` mask as it is.
_PACKABLE_ATTENTION = frozenset({"sdpa", "eager"})


@dataclass(frozen=True)
class _Packing:
    """Where the rows' tokens (``[N, P + T]``: prompts left-padded, completions right-padded)
    sit in the packed sequences ``[B, L]``; positions are flat (``row * width + column``)."""

    #: the decoder body's inputs for the packed sequences.
    kwargs: dict[str, Any]
    #: ``(B, L)``.
    shape: tuple[int, int]
    #: ``[M]``: the packed positions whose hidden states score the real completion tokens, in
    #: the order of ``completion_mask``'s ones (position j scores token j + 1).
    scored: torch.Tensor
    #: ``[B * L]``: for each packed position, a row position holding the same token.
    source: torch.Tensor
    #: ``[N * (P + T)]``: for each row position, the packed position of its token (padding: a
    #: real position of the same group, so its values stay finite).
    target: torch.Tensor


def _packable(body: Any) -> bool:
    config = getattr(body, "config", None)
    if _decoder_layers(body) is None:
        return False
    if getattr(config, "_attn_implementation", None) not in _PACKABLE_ATTENTION:
        return False
    return all(kind == "full_attention" for kind in getattr(config, "layer_types", None) or [])


def packs_prompts(model: Any) -> bool:
    """Whether :func:`completion_logprobs` packs the rows of ``model`` that share a prompt:
    a fusable head (:func:`_fusable_head`), an attention implementation that takes a custom
    mask (``sdpa``, ``eager``), full attention in every layer. It then still packs only a batch
    where that is less work (see :func:`_pack`)."""
    fused = _fusable_head(model)
    return fused is not None and _packable(fused[0])


def _layer_work(body: Any, rows: int, width: int) -> float:
    """Multiply-adds of one decoder layer over ``rows x width`` tokens: its weights once per
    token, and attention over every (query, key) pair of a row (a mask saves no work)."""
    layers = _decoder_layers(body)
    assert layers is not None
    weights = sum(p.numel() for p in layers[0].parameters())
    return rows * width * (weights + 2 * body.config.hidden_size * width)


def _pack(
    body: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> _Packing | None:
    """The rows with equal prompts as one sequence each; None where no prompt is shared, the
    packed batch would be more work than the rows (long completions: attention grows with the
    square of a sequence's length), or the layout is not the trainer's."""
    n, p = prompt_ids.shape
    t = completion_ids.shape[1]
    if n < 2 or not _packable(body):
        return None
    pm, cm = prompt_mask.bool().cpu(), completion_mask.bool().cpu()
    pl, cl = pm.sum(1), cm.sum(1)
    left_padded = torch.equal(pm, torch.arange(p) >= (p - pl)[:, None])
    right_padded = torch.equal(cm, torch.arange(t) < cl[:, None])
    if not (left_padded and right_padded) or bool((pl == 0).any()):
        return None
    prompts, completions = prompt_ids.cpu(), completion_ids.cpu()
    groups: dict[tuple[int, ...], list[int]] = {}
    for i in range(n):
        groups.setdefault(tuple(prompts[i, p - int(pl[i]) :].tolist()), []).append(i)
    b = len(groups)
    length = max(int(pl[rows[0]]) + int(cl[rows].sum()) for rows in groups.values())
    window = getattr(body.config, "sliding_window", None)
    if getattr(body.config, "use_sliding_window", True) is False:
        window = None
    if b == n or (window is not None and length > window):
        return None
    if _layer_work(body, b, length) >= _layer_work(body, n, p + t):
        return None

    width = p + t
    ids = torch.zeros(b, length, dtype=torch.long)
    pos = torch.zeros(b, length, dtype=torch.long)
    seg = torch.full((b, length), -1)  # 0: the prompt, k: the k-th completion, -1: padding
    source = torch.zeros(b, length, dtype=torch.long)
    target = torch.zeros(n, width, dtype=torch.long)
    scored = torch.zeros(n, t, dtype=torch.long)
    for g, rows in enumerate(groups.values()):
        first, lp, at = rows[0], int(pl[rows[0]]), g * length
        prompt = torch.arange(lp)
        ids[g, :lp], pos[g, :lp], seg[g, :lp] = prompts[first, p - lp :], prompt, 0
        source[g, :lp] = first * width + p - lp + prompt
        start = lp
        for k, i in enumerate(rows, 1):
            lc = int(cl[i])
            own = torch.arange(lc)
            span = slice(start, start + lc)
            ids[g, span], pos[g, span], seg[g, span] = completions[i, :lc], lp + own, k
            source[g, span] = i * width + p + own
            target[i] = at  # padding
            target[i, p - lp : p] = at + prompt
            target[i, p : p + lc] = at + start + own
            scored[i, :lc] = at + torch.cat([torch.tensor([lp - 1]), start + own[:-1]])
            start += lc
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    sq, sk = seg[:, :, None], seg[:, None, :]
    allowed = (causal & ((sk == sq) | ((sk == 0) & (sq > 0))))[:, None]
    device = prompt_ids.device
    if body.config._attn_implementation == "eager":  # an additive mask
        mask = torch.zeros(allowed.shape).masked_fill_(~allowed, torch.finfo(torch.float32).min)
    else:
        mask = allowed
    kwargs = {
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "position_ids": pos.to(device),
        "use_cache": False,
    }
    return _Packing(
        kwargs=kwargs,
        shape=(b, length),
        scored=scored[cm].to(device),
        source=source.flatten().to(device),
        target=target.flatten().to(device),
    )


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

    With ``fuse_head`` (default) and a model whose head allows it (see :func:`_fusable_head`:
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
    less work (:func:`_pack`); the results are the rows' own, up to float rounding.
    """
    if temperature <= 0:
        raise ValueError("temperature must be > 0 (use 1.0 for greedy-sampled completions)")
    if chunk_size < 1:
        raise ValueError("chunk_size must be >= 1")
    n, t = completion_ids.shape
    device = prompt_ids.device
    completion_ids = completion_ids.to(device)
    completion_mask = completion_mask.to(device)
    kwargs = _forward_kwargs(prompt_ids, prompt_mask, completion_ids, completion_mask)
    fused = _fusable_head(model) if fuse_head or prefix is not None else None
    if prefix is not None and fused is None:
        raise ValueError("prefix needs a model whose head is fusable (see shared_layers)")
    if fused is not None:
        packing = (
            _pack(fused[0], prompt_ids, prompt_mask, completion_ids, completion_mask)
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
    logp, entropy = _ChunkedLogProbs.apply(
        logits, completion_ids, float(temperature), int(chunk_size), bool(with_entropy)
    )
    valid = completion_mask.bool()
    logp = torch.where(valid, logp, 0.0).float()
    return logp, (torch.where(valid, entropy, 0.0).float() if with_entropy else None)


__all__ = ["completion_logprobs", "packs_prompts", "prefix_hidden", "shared_layers"]
