"""Per-token log-probabilities of completions (:mod:`rlvr.model.logprobs`): against a float64
row-by-row reference, with chunking, gradients, the fused output head, the bottom layers run
once (``prefix``) and prompts packed once per group."""

from __future__ import annotations

import pytest
import torch

from rlvr.config.schema import ModelConfig
from rlvr.model.loading import load_policy
from rlvr.model.logprobs import completion_logprobs
from rlvr.model.tiny import build_tiny_model

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """The tiny Qwen2-shaped test model, float32 on the CPU."""
    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    return load_policy(ModelConfig(name_or_path=str(path)), device=CPU, dtype=torch.float32)


# --------------------------------------------------------------------------- log-probabilities


def _padded_batch(vocab: int, seed: int = 0):
    """Prompts left-padded, completions right-padded, one completion empty."""
    g = torch.Generator().manual_seed(seed)
    prompt_lens, completion_lens = [7, 5, 3, 6, 1, 4], [6, 3, 1, 5, 0, 6]
    n, p, t = len(prompt_lens), max(prompt_lens), max(completion_lens)
    prompt_ids = torch.randint(3, vocab, (n, p), generator=g)
    completion_ids = torch.randint(3, vocab, (n, t), generator=g)
    prompt_mask = torch.zeros(n, p, dtype=torch.long)
    completion_mask = torch.zeros(n, t, dtype=torch.long)
    for i, (lp, lc) in enumerate(zip(prompt_lens, completion_lens, strict=True)):
        prompt_mask[i, p - lp :] = 1
        prompt_ids[i, : p - lp] = 0
        completion_mask[i, :lc] = 1
        completion_ids[i, lc:] = 0
    return prompt_ids, prompt_mask, completion_ids, completion_mask


def _reference(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature):
    """Each row alone, unpadded, full float64 log_softmax."""
    model64 = model.to(torch.float64)
    n, t = completion_ids.shape
    logp = torch.zeros(n, t, dtype=torch.float64)
    entropy = torch.zeros(n, t, dtype=torch.float64)
    with torch.no_grad():
        for i in range(n):
            p = prompt_ids[i][prompt_mask[i].bool()]
            c = completion_ids[i][completion_mask[i].bool()]
            if len(c) == 0:
                continue
            logits = model64(torch.cat([p, c])[None]).logits[0, len(p) - 1 : -1] / temperature
            ls = logits.log_softmax(-1)
            logp[i, : len(c)] = ls.gather(-1, c[:, None])[:, 0]
            entropy[i, : len(c)] = -(ls.exp() * ls).sum(-1)
    model.to(torch.float32)
    return logp, entropy


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_completion_logprobs_matches_reference(policy, temperature):
    model, _ = policy
    batch = _padded_batch(model.config.vocab_size)
    with torch.no_grad():
        logp, entropy = completion_logprobs(
            model, *batch, temperature=temperature, chunk_size=4, with_entropy=True
        )
    ref_logp, ref_entropy = _reference(model, *batch, temperature)
    assert logp.dtype == entropy.dtype == torch.float32
    assert logp.shape == entropy.shape == batch[2].shape
    assert torch.allclose(logp.double(), ref_logp, atol=1e-5)
    assert torch.allclose(entropy.double(), ref_entropy, atol=1e-5)
    invalid = batch[3] == 0
    assert (logp[invalid] == 0).all() and (entropy[invalid] == 0).all()
    assert (logp[~invalid] < 0).all()


def test_completion_logprobs_chunking_is_exact(policy):
    model, _ = policy
    batch = _padded_batch(model.config.vocab_size, seed=1)
    with torch.no_grad():
        whole, ent_whole = completion_logprobs(
            model, *batch, chunk_size=1000, with_entropy=True, fuse_head=False
        )
        for chunk in (1, 2, 5):
            logp, ent = completion_logprobs(
                model, *batch, chunk_size=chunk, with_entropy=True, fuse_head=False
            )
            assert torch.equal(logp, whole) and torch.equal(ent, ent_whole), chunk
        fused, ent_fused = completion_logprobs(model, *batch, chunk_tokens=2, with_entropy=True)
        assert torch.allclose(fused, whole, atol=1e-6) and torch.allclose(ent_fused, ent_whole)
    with_grad, none = completion_logprobs(model, *batch, chunk_size=3)  # checkpointed chunks
    assert none is None and with_grad.requires_grad
    assert torch.equal(with_grad.detach(), whole)


@pytest.mark.parametrize("with_entropy", [False, True])
def test_completion_logprobs_gradients(policy, with_entropy):
    """Gradients through the chunked custom backward equal autograd through a naive
    full-vocabulary log_softmax (log-probs and, optionally, entropies)."""
    model, _ = policy
    batch = _padded_batch(model.config.vocab_size, seed=2)
    prompt_ids, prompt_mask, completion_ids, completion_mask = batch
    g = torch.Generator().manual_seed(0)
    w_logp = torch.randn(completion_ids.shape, generator=g)
    w_ent = torch.randn(completion_ids.shape, generator=g) if with_entropy else None

    def grads(fn):
        model.zero_grad(set_to_none=True)
        logp, entropy = fn()
        loss = (logp * w_logp).sum()
        if with_entropy:
            loss = loss + (entropy * w_ent).sum()
        loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    def naive():  # full-vocab log_softmax, no chunking
        ids = torch.cat([prompt_ids, completion_ids], 1)
        mask = torch.cat([prompt_mask, completion_mask], 1)
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        t = completion_ids.shape[1]
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        ls = (logits[:, -t - 1 : -1] / 0.7).log_softmax(-1)
        logp = ls.gather(-1, completion_ids[..., None])[..., 0] * completion_mask
        entropy = -(ls.exp() * ls).sum(-1) * completion_mask
        return logp, entropy

    def chunked():
        return completion_logprobs(
            model, *batch, temperature=0.7, chunk_size=2, with_entropy=with_entropy
        )

    model.train()
    try:
        expected, got = grads(naive), grads(chunked)
    finally:
        model.eval()
        model.zero_grad(set_to_none=True)
    assert expected.keys() == got.keys() and len(got) == len(list(model.parameters()))
    for name, grad in got.items():
        assert torch.allclose(grad, expected[name], atol=1e-6, rtol=1e-4), name
    assert any(g.abs().sum() > 0 for g in got.values())


def test_chunked_logprobs_gradcheck():
    """The hand-written backward passes torch.autograd.gradcheck (float64)."""
    from rlvr.model.chunked_logprobs import ChunkedLogProbs

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 7, dtype=torch.float64, generator=g, requires_grad=True)
    ids = torch.randint(0, 7, (3, 3), generator=g)
    for temperature, chunk, entropy in [(1.0, 1, False), (0.7, 2, True), (1.3, 8, True)]:
        fn = lambda x, t=temperature, c=chunk, e=entropy: ChunkedLogProbs.apply(x, ids, t, c, e)  # noqa: E731
        assert torch.autograd.gradcheck(fn, (logits,))


# --------------------------------------------------------------------------- fused head


def _llama(tie: bool, **shape):
    """A tiny Llama (SmolLM2's architecture) with a tied or separate head; ``shape`` overrides
    its sizes."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    sizes = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    config = LlamaConfig(vocab_size=300, tie_word_embeddings=tie, **(sizes | shape))
    return LlamaForCausalLM(config).float()


def _logprob_grads(model, batch, fuse, *, temperature, with_entropy, w_logp, w_ent):
    model.zero_grad(set_to_none=True)
    logp, entropy = completion_logprobs(
        model,
        *batch,
        temperature=temperature,
        with_entropy=with_entropy,
        fuse_head=fuse,
        chunk_tokens=5,  # several chunks, the last one partial
    )
    loss = (logp * w_logp).sum()
    if with_entropy:
        loss = loss + (entropy * w_ent).sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp.detach(), None if entropy is None else entropy.detach(), grads


@pytest.mark.parametrize(
    ("arch", "temperature", "with_entropy"),
    [("qwen2-tied", 0.7, True), ("qwen2-untied", 1.0, False), ("llama-tied", 1.0, True)],
)
def test_fused_head_equals_model_forward(policy, tmp_path, arch, temperature, with_entropy):
    """The fused head (decoder body + chunked head inside the autograd function) gives the
    log-probs, entropies and every parameter's gradient of the model's own forward."""
    from rlvr.model.decoder import fusable_head

    if arch == "qwen2-tied":
        model = policy[0]
    elif arch == "qwen2-untied":
        d = build_tiny_model(tmp_path / "untied", tie_word_embeddings=False)
        model = load_policy(ModelConfig(name_or_path=str(d)), device=CPU, dtype=torch.float32)[0]
    else:
        model = _llama(tie=True)
    assert fusable_head(model) is not None
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert tied == arch.endswith("-tied")
    batch = _padded_batch(model.config.vocab_size, seed=3)
    g = torch.Generator().manual_seed(0)
    w_logp = torch.randn(batch[2].shape, generator=g)
    w_ent = torch.randn(batch[2].shape, generator=g)
    kw = {"temperature": temperature, "with_entropy": with_entropy, "w_logp": w_logp}
    model.train()
    try:
        logp, ent, grads = _logprob_grads(model, batch, True, w_ent=w_ent, **kw)
        ref_logp, ref_ent, ref_grads = _logprob_grads(model, batch, False, w_ent=w_ent, **kw)
    finally:
        model.eval()
        model.zero_grad(set_to_none=True)
    assert torch.allclose(logp, ref_logp, atol=1e-5)
    assert (logp[batch[3] == 0] == 0).all()
    if with_entropy:
        assert torch.allclose(ent, ref_ent, atol=1e-5)
    assert grads.keys() == ref_grads.keys() and len(grads) == len(list(model.parameters()))
    for name, grad in grads.items():
        assert torch.allclose(grad, ref_grads[name], atol=1e-6, rtol=1e-4), name


def test_fused_head_gradcheck():
    """The fused head's hand-written backward (hidden, weight, bias) passes gradcheck."""
    from rlvr.model.chunked_logprobs import FusedHeadLogProbs

    g = torch.Generator().manual_seed(0)
    f64 = torch.float64
    hidden = torch.randn(7, 4, dtype=f64, generator=g, requires_grad=True)
    weight = torch.randn(9, 4, dtype=f64, generator=g, requires_grad=True)
    bias = torch.randn(9, dtype=f64, generator=g, requires_grad=True)
    ids = torch.randint(0, 9, (7,), generator=g)
    for temperature, chunk, entropy in [(1.0, 1, False), (0.7, 3, True), (1.3, 100, True)]:

        def fn(h, w, b, t=temperature, c=chunk, e=entropy):
            return FusedHeadLogProbs.apply(h, w, b, ids, t, c, e, f64)

        assert torch.autograd.gradcheck(fn, (hidden, weight, bias))

    def logp_only(h, w, b):  # entropy computed (for logging) but in no loss: grad None
        return FusedHeadLogProbs.apply(h, w, b, ids, 0.7, 3, True, f64)[0]

    assert torch.autograd.gradcheck(logp_only, (hidden, weight, bias))
    frozen = weight.detach()  # a frozen head (LoRA below it) gets no weight gradient
    logp, _ = FusedHeadLogProbs.apply(hidden, frozen, None, ids, 1.0, 3, True, f64)
    (grad_hidden,) = torch.autograd.grad(logp.sum(), hidden)
    logp, _ = FusedHeadLogProbs.apply(hidden, weight, None, ids, 1.0, 3, True, f64)
    assert torch.allclose(grad_hidden, torch.autograd.grad(logp.sum(), (hidden, weight))[0])


def test_fused_head_16bit_compute_sums_the_weight_gradient_in_float32():
    """With bfloat16 matmuls (autocast), the head's weight gradient is the float32 sum over
    all tokens of the chunk products, not a sum of products each rounded to bfloat16 (which
    drifts by ~1e-3 relative here, and biases training). Where there is a GPU, CUDA's
    ``addmm(out_dtype=float32)`` path too: its operands are bfloat16 (as in any autocast
    matmul), so it is held to bfloat16's precision, which still catches a wrong accumulation."""
    from rlvr.model.chunked_logprobs import FusedHeadLogProbs

    bf16 = torch.bfloat16
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
        g = torch.Generator().manual_seed(0)
        hidden = torch.randn(64, 16, generator=g).to(device).requires_grad_()
        weight = torch.randn(50, 16, generator=g).to(device).requires_grad_()
        ids = torch.randint(0, 50, (64,), generator=g).to(device)
        w_logp, w_ent = torch.randn(2, 64, generator=g).to(device)
        logp, ent = FusedHeadLogProbs.apply(hidden, weight, None, ids, 0.7, 1, True, bf16)
        loss = (logp * w_logp + ent * w_ent).sum()
        grad_h, grad_w = torch.autograd.grad(loss, (hidden, weight))
        # Reference: the same bfloat16 logits, then everything in float64.
        x = torch.nn.functional.linear(hidden.detach().to(bf16), weight.detach().to(bf16))
        x = x.double().requires_grad_()
        ls = torch.log_softmax(x / 0.7, -1)
        ref_logp = ls.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        ref_ent = -(ls.exp() * ls).sum(-1)
        (grad_x,) = torch.autograd.grad((ref_logp * w_logp + ref_ent * w_ent).sum(), x)
        assert torch.allclose(logp.double(), ref_logp, atol=1e-5), device
        assert torch.allclose(ent.double(), ref_ent, atol=1e-5), device
        ref_w = grad_x.t() @ hidden.detach().double()
        error = ((grad_w.double() - ref_w).norm() / ref_w.norm()).item()
        assert error < (1e-5 if device == "cpu" else 1e-2), (device, error)
        ref_h = grad_x @ weight.detach().double()  # through a bfloat16 matmul: bf16 precision
        assert torch.allclose(grad_h.double(), ref_h, rtol=2e-2, atol=2e-2), device


def test_fused_head_falls_back_to_the_model_forward(policy):
    """Heads the fused path cannot reproduce use the model's forward (same results)."""
    from rlvr.model.decoder import fusable_head

    model = _llama(tie=False)
    assert fusable_head(model) is not None
    batch = _padded_batch(model.config.vocab_size, seed=4)
    with torch.no_grad():
        expected, _ = completion_logprobs(model, *batch, fuse_head=False)
        model.config.model_type = "gemma2"  # logit soft-capping: not plain lm_head(hidden)
        assert fusable_head(model) is None
        model.config.model_type = "llama"
        model.lm_head = torch.nn.Sequential(model.lm_head)  # not a plain Linear
        assert fusable_head(model) is None
        got, _ = completion_logprobs(model, *batch)
    assert torch.equal(got, expected)


def test_fused_head_through_peft_lora(policy):
    """A peft LoRA model fuses its (not adapted) head; an adapted head falls back. Both equal
    the model's own forward."""
    peft = pytest.importorskip("peft")
    from rlvr.model.decoder import fusable_head

    batch = _padded_batch(300, seed=5)
    for targets, fusable in ((["q_proj", "v_proj"], True), (["q_proj", "lm_head"], False)):
        lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False)
        model = peft.get_peft_model(_llama(tie=False), lora)
        assert (fusable_head(model) is not None) == fusable
        with torch.no_grad():
            got, _ = completion_logprobs(model, *batch)
            expected, _ = completion_logprobs(model, *batch, fuse_head=False)
            with model.disable_adapter():  # the reference model of a LoRA run
                base, _ = completion_logprobs(model, *batch)
        assert torch.allclose(got, expected, atol=1e-5)
        assert not torch.allclose(got, base, atol=1e-3)


# --------------------------------------------------------------------------- shared prompts


def _grouped_batch(vocab: int, seed: int = 0):
    """Six rows of three prompts: A (5 tokens) x3 (one completion empty), B (3 tokens) x2 and
    C (4 tokens) alone; prompts left-padded, completions right-padded, rows interleaved."""
    g = torch.Generator().manual_seed(seed)
    a, b, c = (torch.randint(3, vocab, (k,), generator=g) for k in (5, 3, 4))
    prompts, completion_lens = [a, b, a, c, a, b], [4, 6, 0, 3, 2, 5]
    n, p, t = len(prompts), 5, 6
    prompt_ids = torch.zeros(n, p, dtype=torch.long)
    prompt_mask = torch.zeros(n, p, dtype=torch.long)
    completion_ids = torch.zeros(n, t, dtype=torch.long)
    completion_mask = torch.zeros(n, t, dtype=torch.long)
    for i, (prompt, lc) in enumerate(zip(prompts, completion_lens, strict=True)):
        prompt_ids[i, p - len(prompt) :], prompt_mask[i, p - len(prompt) :] = prompt, 1
        completion_ids[i, :lc] = torch.randint(3, vocab, (lc,), generator=g)
        completion_mask[i, :lc] = 1
    return prompt_ids, prompt_mask, completion_ids, completion_mask


_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=_CUDA)])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_prompts_give_the_rows_own_results(attention, device, monkeypatch):
    """Rows sharing a prompt, packed into one sequence (prompt once, then each completion under
    a mask that hides the others), give each row's log-probs, entropies, parameter gradients
    and hidden states (prefix_hidden) of the row-by-row passes. On a GPU too, where ``sdpa``
    takes the mask through another kernel than the row-by-row passes."""
    from rlvr.model import logprobs, packing

    model = _llama(tie=True).to(device)
    model.config._attn_implementation = attention
    batch = tuple(t.to(device) for t in _grouped_batch(model.config.vocab_size))
    packings = []
    plan = logprobs.plan_packing
    monkeypatch.setattr(
        logprobs, "plan_packing", lambda *a: packings.append(plan(*a)) or packings[-1]
    )
    monkeypatch.setattr(packing, "_layer_work", lambda body, rows, width: rows)  # always pack
    w = torch.randn(batch[2].shape, generator=torch.Generator().manual_seed(1)).to(device)
    results = {}
    model.train()
    for packed in (False, True):
        model.zero_grad(set_to_none=True)
        logp, ent = completion_logprobs(
            model, *batch, temperature=0.7, with_entropy=True, chunk_tokens=4, pack=packed
        )
        ((logp * w).sum() + ent.sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        results[packed] = logp.detach(), ent.detach(), grads
    model.eval()
    assert len(packings) == 1 and packings[0].shape == (3, 3 + 6 + 5)  # A, B (the longest), C
    (logp, ent, grads), (ref_logp, ref_ent, ref_grads) = results[True], results[False]
    assert torch.allclose(logp, ref_logp, atol=1e-5) and torch.allclose(ent, ref_ent, atol=1e-5)
    assert (logp[batch[3] == 0] == 0).all() and (logp[batch[3] == 1] < 0).all()
    for name, grad in grads.items():
        assert torch.allclose(grad, ref_grads[name], atol=1e-6, rtol=1e-4), name
    with torch.no_grad():
        rows = logprobs.prefix_hidden(model, *batch, 1, pack=False)
        packed_rows = logprobs.prefix_hidden(model, *batch, 1)
        real = torch.cat([batch[1], batch[3]], 1).bool()
        assert packed_rows.shape == rows.shape and packed_rows.isfinite().all()
        assert torch.allclose(packed_rows[real], rows[real], atol=1e-6)
        from_prefix, _ = completion_logprobs(model, *batch, prefix=(1, packed_rows))
        whole, _ = completion_logprobs(model, *batch, pack=False)
    assert torch.allclose(from_prefix, whole, atol=1e-5)


def test_prompts_are_packed_only_where_it_saves_work():
    """The real cost rule, on a layer of SmolLM2-135M's shape: 8 completions of 100 tokens
    behind a shared 160-token prompt pack; 16 of 4,000 do not (attention over the packed
    sequence grows with its square); nor do rows with no prompt in common, a sliding window
    shorter than the packed sequence, or an attention implementation that cannot take the
    mask."""
    from rlvr.model import logprobs
    from rlvr.model.packing import plan_packing

    model = _llama(
        tie=True,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=1,
        num_attention_heads=9,
        num_key_value_heads=3,
    )
    model.config._attn_implementation = "sdpa"
    body = model.get_decoder()
    assert logprobs.packs_prompts(model)

    def group(n: int, p: int, t: int, shared: bool = True):
        prompt = torch.randint(3, 300, (1 if shared else n, p)).expand(n, p)
        ones = torch.ones(n, t, dtype=torch.long)
        return prompt, torch.ones(n, p, dtype=torch.long), ones * 5, ones

    assert plan_packing(body, *group(8, 160, 100)) is not None
    assert plan_packing(body, *group(16, 16, 4000)) is None
    assert plan_packing(body, *group(8, 160, 100, shared=False)) is None
    config = body.config
    try:
        config.sliding_window = 500
        assert plan_packing(body, *group(8, 160, 100)) is None  # 960 tokens packed
        config.sliding_window = 1000
        assert plan_packing(body, *group(8, 160, 100)) is not None
        config.use_sliding_window = False
        config.sliding_window = 500
        assert plan_packing(body, *group(8, 160, 100)) is not None
    finally:
        config.sliding_window, config.use_sliding_window = None, False
    attention = config._attn_implementation
    try:
        config._attn_implementation = "flash_attention_2"
        assert not logprobs.packs_prompts(model)
        assert plan_packing(body, *group(8, 160, 100)) is None
    finally:
        config._attn_implementation = attention
