"""Log-probabilities and entropies of given tokens as autograd functions that never hold a
float32 ``[N, T, V]`` tensor: :class:`ChunkedLogProbs` from a model's logits, a few rows at a
time; :class:`FusedHeadLogProbs` from hidden states and the output head, a few tokens at a time
(the logits exist one chunk at a time). :func:`rlvr.model.logprobs.completion_logprobs` picks
one."""

from __future__ import annotations

import functools

import torch


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


class ChunkedLogProbs(torch.autograd.Function):
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


class FusedHeadLogProbs(torch.autograd.Function):
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


__all__ = ["ChunkedLogProbs", "FusedHeadLogProbs"]
