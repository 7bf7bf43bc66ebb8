"""The built-in ``hf`` backend: registration and transformers-generate() sampling."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"

import pydantic
import pytest
import torch

import rlvr.plugins.backends as backends
from rlvr.api.host import create_host
from rlvr.api.runtime import Generation, RunInfo, SamplingParams
from rlvr.config.schema import ModelConfig
from rlvr.model.loading import load_policy
from rlvr.model.tiny import build_tiny_model
from rlvr.plugins.backends.hf import HFGenerator
from rlvr.plugins.backends.params import HFParams

RUN = RunInfo(max_completion_length=12, num_generations=3, seed=0)
TEXTS = ["What is 1 + 2?", "Natalia has 48 clips.", "hi", "<think>"]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    return load_policy(
        ModelConfig(name_or_path=str(path)), device=torch.device("cpu"), dtype=torch.float32
    )


@pytest.fixture(scope="module")
def prompts(policy):
    _, tok = policy
    return [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]


def make(policy, **params):
    model, tok = policy
    return HFGenerator(HFParams(**params), RUN, model, tok)


def check_well_formed(gen: Generation, n_prompts: int, n: int, max_tokens: int, eos, tok):
    assert len(gen.token_ids) == len(gen.texts) == len(gen.truncated) == n_prompts * n
    assert gen.logprobs is None
    eos = set(eos)
    for ids, text, truncated in zip(gen.token_ids, gen.texts, gen.truncated, strict=True):
        assert 1 <= len(ids) <= max_tokens
        assert all(isinstance(i, int) for i in ids)
        assert not eos & set(ids[:-1]), "nothing after the first eos"
        if truncated:
            assert ids[-1] not in eos and len(ids) == max_tokens
        else:
            assert ids[-1] in eos
        assert text == tok.decode(ids, skip_special_tokens=True)


# --------------------------------------------------------------------------- registration


def test_registered_with_capabilities():
    host = create_host(entrypoints=False, plugins=[backends])
    record = host.backends["hf"]
    assert record.params is HFParams
    assert record.capabilities.sampler_logprobs is False
    assert record.capabilities.reference_logprobs is True
    assert record.available() is None
    assert record.description


def test_registration_imports_no_torch():
    code = (
        "import sys, rlvr.plugins.backends as b; from rlvr.api.host import create_host; "
        "create_host(entrypoints=False, plugins=[b]); "
        "bad = [m for m in ('torch', 'transformers', 'vllm') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_params():
    assert HFParams() == HFParams(batch_size=None, use_cache=True, share_prompt_prefill=True)
    with pytest.raises(pydantic.ValidationError):
        HFParams(batch_size=0)
    with pytest.raises(pydantic.ValidationError):
        HFParams(batchsize=4)  # unknown keys are errors


# --------------------------------------------------------------------------- generation


def test_greedy_is_deterministic_and_grouped(policy, prompts):
    gen = make(policy)
    model, tok = policy
    greedy = SamplingParams(max_tokens=8, temperature=0.0)
    out = gen.generate(prompts, 2, greedy)
    check_well_formed(out, len(prompts), 2, 8, gen.eos_ids, tok)
    assert out.token_ids == gen.generate(prompts, 2, greedy).token_ids
    for i in range(0, len(out.token_ids), 2):  # group layout: i // n
        assert out.token_ids[i] == out.token_ids[i + 1]
    alone = gen.generate([prompts[1]], 1, greedy)
    assert alone.token_ids[0] == out.token_ids[2]  # prompt 1 is completions 2 and 3


def test_seeded_sampling_is_reproducible(policy, prompts):
    gen = make(policy, batch_size=5)
    _, tok = policy
    sampling = SamplingParams(max_tokens=10, temperature=1.0, seed=123)
    rng_before = torch.get_rng_state()
    a = gen.generate(prompts, 3, sampling)
    assert torch.equal(torch.get_rng_state(), rng_before)  # the global RNG is left alone
    b = gen.generate(prompts, 3, sampling)
    assert a.token_ids == b.token_ids
    check_well_formed(a, len(prompts), 3, 10, gen.eos_ids, tok)
    c = gen.generate(prompts, 3, SamplingParams(max_tokens=10, temperature=1.0, seed=124))
    assert c.token_ids != a.token_ids
    # samples of one prompt differ from each other (a random tiny model is near-uniform)
    assert len({tuple(ids) for ids in a.token_ids[:3]}) > 1


def test_batch_size_limits_generate_calls(policy, prompts, monkeypatch):
    model, _ = policy
    gen = make(policy, batch_size=4)
    sizes = []
    original = model.generate

    def spy(*args, **kwargs):
        sizes.append(kwargs["input_ids"].shape[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "generate", spy)
    out = gen.generate(prompts, 3, SamplingParams(max_tokens=4, seed=0))
    assert sizes == [4, 4, 4]
    assert len(out.token_ids) == 12
    sizes.clear()
    make(policy).generate(prompts, 3, SamplingParams(max_tokens=4, seed=0))
    assert sizes == [12]


def test_eos_ends_completions(policy, prompts):
    """Make a frequent token an extra eos (as a model's generation_config may list several):
    completions end right after it, the others are truncated at max_tokens."""
    model, tok = policy
    sampling = SamplingParams(max_tokens=12, temperature=1.0, seed=7)
    free = make(policy).generate(prompts, 4, sampling)
    counts = collections.Counter(t for ids in free.token_ids for t in ids)
    frequent = counts.most_common(1)[0][0]
    saved = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = [tok.eos_token_id, frequent]
    try:
        gen = make(policy)
        assert set(gen.eos_ids) == {tok.eos_token_id, frequent}
        out = gen.generate(prompts, 4, sampling)
    finally:
        model.generation_config.eos_token_id = saved
    check_well_formed(out, len(prompts), 4, 12, gen.eos_ids, tok)
    assert not all(out.truncated)
    ended = [ids for ids, cut in zip(out.token_ids, out.truncated, strict=True) if not cut]
    assert all(ids[-1] == frequent for ids in ended)
    assert any(len(ids) < 12 for ids in ended)
    # the rest of the batch ran on: its rows are max_tokens long, not padded with eos
    assert all(len(ids) == 12 for ids, cut in zip(out.token_ids, out.truncated, strict=True) if cut)


def test_sampling_settings_apply(policy, prompts):
    model, _ = policy
    gen = make(policy)
    greedy = gen.generate(prompts, 1, SamplingParams(max_tokens=6, temperature=0.0))
    top1 = gen.generate(prompts, 1, SamplingParams(max_tokens=6, temperature=1.0, top_k=1, seed=1))
    assert top1.token_ids == greedy.token_ids
    # the model's own generation defaults do not leak into sampling
    model.generation_config.top_k = 1
    model.generation_config.do_sample = False
    try:
        free = gen.generate(prompts, 1, SamplingParams(max_tokens=6, temperature=1.0, seed=1))
    finally:
        model.generation_config.top_k = None
        model.generation_config.do_sample = None
    assert free.token_ids != greedy.token_ids
    for sampling in (
        SamplingParams(max_tokens=5, temperature=0.8, top_p=0.9, seed=2),
        SamplingParams(max_tokens=5, temperature=1.2, min_p=0.05, seed=2),
        SamplingParams(max_tokens=5, temperature=0.0, repetition_penalty=1.3),
    ):
        out = gen.generate(prompts, 2, sampling)
        assert all(1 <= len(ids) <= 5 for ids in out.token_ids)


def test_train_mode_and_grad_state(policy, prompts):
    model, _ = policy
    gen = make(policy)
    model.train()
    try:
        gen.generate(prompts[:1], 1, SamplingParams(max_tokens=3, seed=0))
        assert model.training
        assert all(p.grad is None for p in model.parameters())
    finally:
        model.eval()
    gen.generate(prompts[:1], 1, SamplingParams(max_tokens=3, seed=0))
    assert not model.training


def test_edge_cases(policy, prompts):
    gen = make(policy)
    empty = gen.generate([], 4, SamplingParams(max_tokens=3))
    assert empty.token_ids == [] and empty.texts == [] and empty.truncated == []
    with pytest.raises(ValueError, match="at least one token"):
        gen.generate([[]], 1, SamplingParams(max_tokens=3))
    with pytest.raises(ValueError, match="n must be"):
        gen.generate(prompts, 0, SamplingParams(max_tokens=3))
    model, _ = policy
    gen.sync_weights(model)  # a no-op: generation uses the training model itself
    assert gen.model is model
    gen.close()


# --------------------------------------------------------------------------- shared prefill


def forward_inputs(model, fn):
    """The ``input_ids`` shapes of the model's forward passes while ``fn()`` runs."""
    shapes = []

    def hook(module, args, kwargs):
        shapes.append(tuple(kwargs["input_ids"].shape))

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        fn()
    finally:
        handle.remove()
    return shapes


def test_shared_prefill_reads_each_prompt_once(policy, prompts):
    """With n > 1 the prompts run once (all but their last token, in one pass over the
    distinct prompts); generate() then runs only the last prompt token of each of the n * P
    rows, where without sharing it runs every prompt token of every row."""
    model, _ = policy
    width = max(len(p) for p in prompts)
    rows = len(prompts) * 3
    sampling = SamplingParams(max_tokens=4, temperature=1.0, seed=0)
    shared = forward_inputs(model, lambda: make(policy).generate(prompts, 3, sampling))
    assert shared[:2] == [(len(prompts), width - 1), (rows, 1)]
    assert all(shape == (rows, 1) for shape in shared[1:])
    unshared = make(policy, share_prompt_prefill=False)
    assert forward_inputs(model, lambda: unshared.generate(prompts, 3, sampling))[0] == (
        rows,
        width,
    )
    # nothing repeats with n = 1, and nothing is cached without use_cache: no extra pass
    alone = forward_inputs(model, lambda: make(policy).generate(prompts, 1, sampling))
    assert alone[0] == (len(prompts), width)
    no_cache = make(policy, use_cache=False)
    assert forward_inputs(model, lambda: no_cache.generate(prompts, 3, sampling))[0] == (
        rows,
        width,
    )
    # a chunk that splits a group (batch_size 5, n 3) prefills the prompts it holds
    chunks = forward_inputs(
        model, lambda: make(policy, batch_size=5).generate(prompts, 3, sampling)
    )
    assert (2, width - 1) in chunks


SHARED_SAMPLINGS = [
    SamplingParams(max_tokens=12, temperature=0.0, logprobs=True),
    SamplingParams(max_tokens=12, temperature=1.0, seed=3, logprobs=True),
    SamplingParams(
        max_tokens=12,
        temperature=0.7,
        top_p=0.9,
        top_k=20,
        repetition_penalty=1.2,
        seed=5,
        logprobs=True,
    ),
]


def assert_same_generation(a: Generation, b: Generation) -> None:
    assert a.token_ids == b.token_ids
    assert a.truncated == b.truncated
    assert a.texts == b.texts
    assert a.logprobs is not None and b.logprobs is not None
    for la, lb in zip(a.logprobs, b.logprobs, strict=True):
        assert la == pytest.approx(lb, abs=1e-5)


@pytest.mark.parametrize("batch_size", [None, 5])
@pytest.mark.parametrize("sampling", SHARED_SAMPLINGS, ids=["greedy", "sampled", "top_p"])
def test_shared_prefill_gives_the_unshared_samples(policy, prompts, batch_size, sampling):
    """Prompts of different lengths (left padding), n > 1, groups split across chunks: the
    same tokens and log-probs as when every row runs its own prompt."""
    assert len({len(p) for p in prompts}) > 2
    unshared = make(policy, batch_size=batch_size, share_prompt_prefill=False)
    expected = unshared.generate(prompts, 3, sampling)
    assert_same_generation(
        make(policy, batch_size=batch_size).generate(prompts, 3, sampling), expected
    )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_generate_warns_nothing(policy, prompts, dtype):
    """#45 item 14: every run printed a FutureWarning attributed to this backend (the prompt
    cache handed to generate()). Every path of a generate call, the shared prompt cache, the
    recorded log-probs and bfloat16 autocast included, must warn nothing at all."""
    model, tok = policy
    run = RunInfo(max_completion_length=12, num_generations=3, seed=0, dtype=dtype)
    gen = HFGenerator(HFParams(batch_size=5), run, model, tok)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test, whoever raises it
        gen.generate(prompts, 3, SamplingParams(max_tokens=5, seed=0))
        gen.generate(prompts, 3, SamplingParams(max_tokens=5, seed=0, logprobs=True))
        gen.generate(prompts, 1, SamplingParams(max_tokens=5, temperature=0.0))


def test_shared_prefill_with_lora_adapters(tmp_path, prompts):
    """A peft model: the prefill pass runs through the adapters (random, non-zero ones here,
    so the samples differ from the base model's)."""
    peft = pytest.importorskip("peft")  # optional extra (rlvr[lora])
    path = build_tiny_model(tmp_path / "model")
    base, tok = load_policy(
        ModelConfig(name_or_path=str(path)), device=torch.device("cpu"), dtype=torch.float32
    )
    sampling = SHARED_SAMPLINGS[1]
    plain = HFGenerator(HFParams(), RUN, base, tok).generate(prompts, 3, sampling)
    torch.manual_seed(0)
    config = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    model = peft.get_peft_model(base, config)
    unshared = HFGenerator(HFParams(share_prompt_prefill=False), RUN, model, tok)
    expected = unshared.generate(prompts, 3, sampling)
    assert expected.token_ids != plain.token_ids
    shared = HFGenerator(HFParams(), RUN, model, tok).generate(prompts, 3, sampling)
    assert_same_generation(shared, expected)


def test_a_copy_of_the_policy_takes_its_weights(policy, prompts):
    """Asynchronous rollouts: the generator holds its own copy, sync_weights updates it."""
    import copy

    model, tok = policy
    trained = copy.deepcopy(model)
    gen = HFGenerator(HFParams(), RUN, copy.deepcopy(model), tok)
    torch.manual_seed(0)
    with torch.no_grad():
        trained.lm_head.weight.add_(torch.randn_like(trained.lm_head.weight))
    greedy = SamplingParams(max_tokens=6, temperature=0)
    before = gen.generate(prompts, 1, greedy).token_ids
    gen.sync_weights(trained)
    for mine, theirs in zip(gen.model.parameters(), trained.parameters(), strict=True):
        assert torch.equal(mine, theirs) and mine.data_ptr() != theirs.data_ptr()
    assert (
        gen.generate(prompts, 1, greedy).token_ids
        == HFGenerator(HFParams(), RUN, trained, tok).generate(prompts, 1, greedy).token_ids
    )
    assert before is not None
