"""A LoRA policy's adapter synced to vLLM alone (``backend.params.lora_sync``,
:mod:`rlvr.plugins.backends.vllm_lora`): which adapters vLLM can apply itself, the adapter as
written for it, and a real (CPU) engine and server sampling base + adapter as the trainer's
peft model does, before and after an in-place adapter update."""

from __future__ import annotations

import copy
import importlib.util
import json

import pytest
import torch

peft = pytest.importorskip("peft", reason="LoRA needs peft (the test extra installs it)")

from rlvr.plugin import PluginError  # noqa: E402
from rlvr.plugins.backends import INSTALL_HINT  # noqa: E402
from rlvr.plugins.backends.vllm_lora import EngineLora, engine_lora  # noqa: E402

NO_VLLM = importlib.util.find_spec("vllm") is None
LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.model.tiny import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def with_adapter(model, seed: int = 0, **lora):
    """``model`` (copied) with a LoRA adapter whose B is random, so it changes the outputs."""
    config = peft.LoraConfig(**({"r": 4, "lora_alpha": 8, "target_modules": LINEAR} | lora))
    policy = peft.get_peft_model(copy.deepcopy(model), config)
    randomize(policy, seed)
    return policy


def randomize(policy, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)


def greedy(model, prompt: list[int], n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)
    return out[0, len(prompt) :].tolist()


# --------------------------------------------------------------------------- which way


def test_an_adapter_vllm_can_apply_goes_alone_with_its_rank_rounded_up(tiny):
    model, _ = tiny
    assert engine_lora(with_adapter(model, r=4), "auto", "cuda") == EngineLora(max_rank=8)
    assert engine_lora(with_adapter(model, r=33), "adapter", "cpu") == EngineLora(max_rank=64)
    assert engine_lora(with_adapter(model), "merged", "cuda") is None
    assert engine_lora(model, "adapter", "cuda") is None  # a plain model has no adapter to send


def test_on_a_cpu_auto_merges(tiny, caplog):
    """vLLM's CPU LoRA ops cost more in generation than the adapter saves in the sync."""
    model, _ = tiny
    with caplog.at_level("INFO"):
        assert engine_lora(with_adapter(model), "auto", "cpu") is None
    assert "on a CPU vLLM's LoRA ops make generation many times slower" in caplog.text


@pytest.mark.parametrize(
    ("lora", "why"),
    [
        ({"use_dora": True}, "DoRA"),
        ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
        ({"target_modules": ["embed_tokens", "q_proj"]}, "embed_tokens"),
        ({"rank_pattern": {"q_proj": 8}}, "rank_pattern"),
    ],
)
def test_what_vllm_cannot_apply_goes_merged_or_is_refused(tiny, lora, why, caplog):
    model, _ = tiny
    policy = with_adapter(model, **lora)
    with caplog.at_level("INFO"):
        assert engine_lora(policy, "auto", "cuda") is None
    assert why in caplog.text
    with pytest.raises(PluginError, match=f"lora_sync: adapter: .*{why}.*lora_sync: merged"):
        engine_lora(policy, "adapter", "cuda")


def test_the_adapter_is_written_as_peft_loads_it(tiny, tmp_path):
    model, _ = tiny
    policy = with_adapter(model, seed=3)
    EngineLora.write(policy, tmp_path / "adapter")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 4 and sorted(config["target_modules"]) == sorted(LINEAR)
    loaded = peft.PeftModel.from_pretrained(copy.deepcopy(model), tmp_path / "adapter")
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, policy(ids).logits, rtol=0, atol=1e-6)
        assert not torch.allclose(model(ids).logits, policy(ids).logits, atol=1e-3)


# --------------------------------------------------------------------------- vLLM


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize("mode", ["colocated", "server"])
def test_vllm_samples_base_plus_adapter_and_takes_each_update_as_the_adapter_alone(
    tiny, mode, tmp_path
):
    """The engine applies the adapter itself: greedy tokens are the peft model's, before and
    after an update; after the first sync no base weight is sent again."""
    if NO_VLLM:
        pytest.skip(f"vLLM is not installed ({INSTALL_HINT})")
    from rlvr.api.runtime import RunInfo, SamplingParams
    from rlvr.plugins.backends.params import VLLMParams
    from rlvr.plugins.backends.vllm_servers import vllm_generator

    model, tokenizer = tiny
    policy = with_adapter(model, seed=1)
    run = RunInfo(
        max_completion_length=8, num_generations=2, max_prompt_length=32, output_dir=str(tmp_path)
    )
    params = VLLMParams(mode=mode, kv_cache_space_gb=0.25, lora_sync="adapter")
    gen = vllm_generator(params, run, policy, tokenizer)
    try:
        assert gen.lora == EngineLora(max_rank=8)
        prompt = [5, 6, 7, 8]
        out = gen.generate([prompt], 1, SamplingParams(max_tokens=6, temperature=0))
        assert out.token_ids[0] == greedy(policy, prompt, 6) != greedy(model, prompt, 6)

        sent = []
        if mode == "colocated":
            rpc = gen.llm.collective_rpc
            gen.llm.collective_rpc = lambda *a, **k: sent.append(a[0]) or rpc(*a, **k)
        else:
            from rlvr.plugins.backends import vllm_servers

            real = vllm_servers.call
            vllm_servers.call = lambda url, path, *a, **k: (
                sent.append(path) or real(url, path, *a, **k)
            )
        try:
            randomize(policy, seed=2)  # the update
            gen.sync_weights(policy)
        finally:
            if mode == "server":
                vllm_servers.call = real
        assert "reload_weights" not in sent and "/update_weights" not in sent
        out = gen.generate([prompt], 1, SamplingParams(max_tokens=6, temperature=0))
        assert out.token_ids[0] == greedy(policy, prompt, 6)
    finally:
        gen.close()
