"""rlvr.model.tiny and rlvr.model.loading: tiny models, loading (GGUF included),
log-probabilities."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest
import torch

from rlvr.config.schema import ModelConfig
from rlvr.model.loading import (
    ModelLoadError,
    cpu_computes_bfloat16,
    gguf_cache_root,
    load_policy,
    resolve_device_dtype,
)
from rlvr.model.tiny import (
    BOS_CHAT,
    EOS_TOKEN,
    PAD_TOKEN,
    TAG_TOKENS,
    build_tiny_model,
    write_gguf,
)

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def policy(tiny_dir):
    return load_policy(ModelConfig(name_or_path=str(tiny_dir)), device=CPU, dtype=torch.float32)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- tiny model


def test_build_is_fast_and_deterministic(tmp_path, tiny_dir):
    start = time.perf_counter()
    again = build_tiny_model(tmp_path / "again")
    assert time.perf_counter() - start < 5
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert _digest(again / name) == _digest(tiny_dir / name), name
    other = build_tiny_model(tmp_path / "other", seed=1)
    assert _digest(other / "model.safetensors") != _digest(tiny_dir / "model.safetensors")
    assert _digest(other / "tokenizer.json") == _digest(tiny_dir / "tokenizer.json")


def test_tiny_model_loads_with_auto_classes(tiny_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    assert model.dtype == torch.float32
    assert (tiny_dir / "model.safetensors").is_file()
    cfg = model.config
    assert cfg.model_type == "qwen2"
    assert cfg.head_dim == 64 and cfg.num_attention_heads * cfg.head_dim == cfg.hidden_size
    assert cfg.vocab_size == len(tok) == 512
    assert tok.eos_token == EOS_TOKEN and cfg.eos_token_id == tok.eos_token_id
    assert tok.pad_token == PAD_TOKEN and cfg.pad_token_id == tok.pad_token_id
    assert model.generation_config.eos_token_id == tok.eos_token_id


def test_tiny_tokenizer_tags_and_template(policy):
    _, tok = policy
    for tag in TAG_TOKENS:
        assert len(tok(tag, add_special_tokens=False)["input_ids"]) == 1, tag
    text = "What is 12 + 7? <think>12 + 7 = 19</think> <answer>19</answer>"
    ids = tok(text + EOS_TOKEN, add_special_tokens=False)["input_ids"]
    assert ids[-1] == tok.eos_token_id
    assert tok.convert_ids_to_tokens(ids).count("1") >= 3  # digits one by one
    assert tok.decode(ids, skip_special_tokens=True) == text  # tags kept, eos dropped
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    # byte-level: any text round-trips
    weird = "Ünïcödé ✓ 3½ \t\n"
    assert tok.decode(tok(weird)["input_ids"]) == weird


def test_build_rejects_bad_head_layout(tmp_path):
    with pytest.raises(ValueError, match="head_dim"):
        build_tiny_model(tmp_path / "bad", hidden_size=64, num_heads=2, head_dim=64)


# --------------------------------------------------------------------------- loading


@pytest.mark.parametrize("native", [True, False])
def test_resolve_device_dtype(monkeypatch, native):
    """``auto`` computes in bfloat16 on a GPU, and on a CPU only where it has the instructions."""
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert cpu_computes_bfloat16() is native
    device, dtype = resolve_device_dtype("auto")
    if torch.cuda.is_available():
        assert (device.type, dtype) == ("cuda", torch.bfloat16)
    else:
        assert (device.type, dtype) == ("cpu", torch.bfloat16 if native else torch.float32)
    assert resolve_device_dtype("float32")[1] == torch.float32
    assert resolve_device_dtype("bfloat16")[1] == torch.bfloat16
    with pytest.raises(ValueError):
        resolve_device_dtype("float8")


def test_load_policy_local_dir(policy):
    model, tok = policy
    assert model.dtype == torch.float32
    assert next(model.parameters()).device.type == "cpu"
    assert tok.padding_side == "left"
    assert tok.pad_token_id is not None
    assert model.generation_config.pad_token_id == tok.pad_token_id


def test_load_policy_errors(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_policy(ModelConfig(name_or_path=str(tmp_path / "missing")))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_policy(ModelConfig(name_or_path=str(tmp_path / "missing.gguf")))
    # The real-model example's GGUF (docs/getting-started/first-real-model.md), not fetched
    # yet: the message names the script that fetches it.
    missing_example = tmp_path / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    with pytest.raises(ModelLoadError, match="does not exist; fetch it first with `bash examples"):
        load_policy(ModelConfig(name_or_path=str(missing_example)))
    with pytest.raises(ModelLoadError) as other:
        load_policy(ModelConfig(name_or_path=str(tmp_path / "missing.gguf")))
    assert "fetch_smollm2" not in str(other.value)
    # #45 item 17: a hub id, not first of all a missing path relative to the current directory
    with pytest.raises(ModelLoadError) as hub_id:
        load_policy(ModelConfig(name_or_path="no-such-org/no-such-model"))
    assert str(hub_id.value).startswith(
        "cannot load the model 'no-such-org/no-such-model': it is neither a local path "
        f"(nothing at '{Path('no-such-org/no-such-model').absolute()}') nor a model in the local "
        "Hugging Face cache, and the hub is not asked offline (HF_HUB_OFFLINE is set)"
    )
    with pytest.raises(ModelLoadError, match="x.gguf"):
        load_policy(ModelConfig(name_or_path=str(tmp_path), gguf_file="x.gguf"))


def test_gguf_cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv("RLVR_GGUF_CACHE", "off")
    assert gguf_cache_root() is None
    monkeypatch.setenv("RLVR_GGUF_CACHE", str(tmp_path))
    assert gguf_cache_root() == tmp_path
    monkeypatch.delenv("RLVR_GGUF_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert gguf_cache_root() == tmp_path / "rlvr" / "gguf"


def _check_dense_roundtrip(model, tok, ref_model, ref_tok, tmp_path, atol):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert not hasattr(model.config, "quantization_config")
    assert getattr(model, "hf_quantizer", None) is None
    x = torch.tensor([[5, 17, 99, 3, 250, 7]])
    with torch.no_grad():
        logits = model(x).logits
        assert torch.allclose(logits, ref_model(x).logits, atol=atol)
    text = "Weng has 12 clips. <think>12 * 3 = 36</think> <answer>36</answer><|im_end|>"
    assert tok(text)["input_ids"] == ref_tok(text)["input_ids"]
    assert tok.chat_template == ref_tok.chat_template
    assert tok.padding_side == "left"
    # save_pretrained works and the result loads without the GGUF file
    out = tmp_path / "saved"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    assert "quantization_config" not in (out / "config.json").read_text()
    again = AutoModelForCausalLM.from_pretrained(out)
    with torch.no_grad():
        assert torch.equal(again(x).logits, logits)
    assert AutoTokenizer.from_pretrained(out)(text)["input_ids"] == tok(text)["input_ids"]


def test_a_gguf_tokenizer_is_made_to_agree_with_the_file(tiny_dir, policy, tmp_path):
    """What transformers 5.17 builds from a GGUF file (seen on a GPU host): eos read as bos, no
    pad, added tokens split into pieces. The file's own vocabulary puts all of it right."""
    import json

    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from rlvr.model.loading import _match_gguf_vocabulary

    _, ref_tok = policy
    path = write_gguf(tiny_dir, tmp_path / "tiny.gguf")
    state = json.loads(ref_tok.backend_tokenizer.to_str())
    state["added_tokens"] = [t for t in state["added_tokens"] if t["content"] not in TAG_TOKENS]
    broken = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(state)))
    broken.eos_token = BOS_CHAT
    text = "Weng has 12 clips. <think>12 * 3 = 36</think> <answer>36</answer><|im_end|>"
    assert broken(text)["input_ids"] != ref_tok(text)["input_ids"]
    assert broken.eos_token != EOS_TOKEN and broken.pad_token is None

    _match_gguf_vocabulary(broken, path)
    assert broken(text)["input_ids"] == ref_tok(text)["input_ids"]
    assert (broken.eos_token, broken.pad_token) == (EOS_TOKEN, ref_tok.pad_token)
    assert broken.eos_token_id == ref_tok.eos_token_id
    assert all(len(broken(t, add_special_tokens=False)["input_ids"]) == 1 for t in TAG_TOKENS)


@pytest.mark.parametrize("cache", [False, True])
def test_load_policy_gguf(tiny_dir, policy, tmp_path, monkeypatch, cache):
    """A GGUF exported from the tiny model loads dequantized, trains and saves like any model."""
    ref_model, ref_tok = policy
    gguf_dir = tmp_path / "gguf"
    gguf_dir.mkdir()
    write_gguf(tiny_dir, gguf_dir / "tiny.gguf")
    write_gguf(tiny_dir, gguf_dir / "tiny-q8.gguf", qtype="Q8_0")
    cache_dir = tmp_path / "cache"
    monkeypatch.setenv("RLVR_GGUF_CACHE", str(cache_dir) if cache else "0")

    # a .gguf path, and a directory + gguf_file
    model, tok = load_policy(
        ModelConfig(name_or_path=str(gguf_dir / "tiny.gguf")), device=CPU, dtype=torch.float32
    )
    _check_dense_roundtrip(model, tok, ref_model, ref_tok, tmp_path / "f32", atol=1e-5)
    model, tok = load_policy(
        ModelConfig(name_or_path=str(gguf_dir), gguf_file="tiny-q8.gguf"),
        device=CPU,
        dtype=torch.float32,
    )
    _check_dense_roundtrip(model, tok, ref_model, ref_tok, tmp_path / "q8", atol=3e-2)
    assert len(list(cache_dir.glob("*/config.json")) if cache else []) == (2 if cache else 0)
    if cache:  # second load comes from the cache, same weights
        again, _ = load_policy(
            ModelConfig(name_or_path=str(gguf_dir / "tiny-q8.gguf")),
            device=CPU,
            dtype=torch.float32,
        )
        for (k, a), b in zip(model.state_dict().items(), again.state_dict().values(), strict=True):
            assert torch.equal(a, b), k
    # a requested dtype applies to GGUF models too
    half, _ = load_policy(
        ModelConfig(name_or_path=str(gguf_dir / "tiny.gguf")), device=CPU, dtype=torch.bfloat16
    )
    assert half.dtype == torch.bfloat16


@pytest.mark.slow
def test_load_policy_smollm2_gguf(smollm2_gguf, tmp_path, monkeypatch):
    """The real SmolLM2-135M-Instruct Q4_1 GGUF (examples/fetch_smollm2.sh) loads and answers."""
    path = str(smollm2_gguf)
    monkeypatch.setenv("RLVR_GGUF_CACHE", str(tmp_path / "cache"))
    model, tok = load_policy(ModelConfig(name_or_path=path), device=CPU, dtype=torch.float32)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert 134_000_000 < sum(p.numel() for p in model.parameters()) < 135_000_000
    assert not hasattr(model.config, "quantization_config")
    assert tok.eos_token == "<|im_end|>" and tok.padding_side == "left"
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True
    )
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)
    assert "5" in tok.decode(out[0, len(ids) :], skip_special_tokens=True)
    model.save_pretrained(tmp_path / "saved")  # no quantization config left in the way
    cached, _ = load_policy(ModelConfig(name_or_path=path), device=CPU, dtype=torch.float32)
    x = torch.tensor([ids])
    with torch.no_grad():
        assert torch.equal(cached(x).logits, model(x).logits)


@pytest.mark.slow
@pytest.mark.vllm
def test_tiny_model_loads_in_vllm(tiny_dir, policy):
    """The same directory runs in vLLM (CPU build) and greedy-decodes like transformers."""
    pytest.importorskip("vllm")
    script = f"""
import os, json
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
from vllm import LLM, SamplingParams
llm = LLM(model={str(tiny_dir)!r}, dtype="float32", max_model_len=256, seed=0, enforce_eager=True)
greedy = SamplingParams(max_tokens=8, temperature=0)
out = llm.generate([{{"prompt_token_ids": [5, 17, 99, 3]}}], greedy)
print("TOKENS", json.dumps(list(out[0].outputs[0].token_ids)))
"""
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("TOKENS "))
    vllm_tokens = json.loads(line.split(" ", 1)[1])
    model, _ = policy
    with torch.no_grad():
        hf = model.generate(torch.tensor([[5, 17, 99, 3]]), max_new_tokens=8, do_sample=False)
    assert vllm_tokens == hf[0, 4:].tolist()


def test_a_busy_cpu_warns_about_torch_threads(monkeypatch):
    """Threads starve on a loaded CPU: say so (with the fix) instead of changing the count,
    which would change the float sums of a resumed run."""
    from rlvr.model.loading import busy_cpu_warning

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    message = busy_cpu_warning(load=1.9, cores=2, threads=2)
    assert message is not None and "load 1.9 on 2 cores" in message
    assert "OMP_NUM_THREADS=1" in message
    assert busy_cpu_warning(load=0.5, cores=2, threads=2) is None  # a quiet machine
    assert busy_cpu_warning(load=3.0, cores=2, threads=1) is None  # one thread cannot starve
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert busy_cpu_warning(load=3.0, cores=2, threads=2) is None  # the user chose
