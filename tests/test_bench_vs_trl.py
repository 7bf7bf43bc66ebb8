"""bench/vs_trl.py without TRL: argument checks, the work-matching settings, the reward, the
summary. (Running TRL itself needs its scratch venv; the bench does that, never CI.)"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from rlvr.api.host import create_host
from rlvr.config.schema import load_config

BENCH = Path(__file__).resolve().parents[1] / "bench" / "vs_trl.py"


@pytest.fixture(scope="module")
def vs_trl():
    spec = importlib.util.spec_from_file_location("bench_vs_trl", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


def test_parse_args_rejects_bad_input(vs_trl, capsys):
    args = vs_trl.parse_args(["--models", "tiny,smollm2", "--steps", "3", "--warmup", "0"])
    assert args.models == ["tiny", "smollm2"]
    assert (args.steps, args.warmup) == (3, 0)
    with pytest.raises(SystemExit):
        vs_trl.parse_args(["--models", "tiny,qwen"])
    assert "unknown model(s) ['qwen']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        vs_trl.parse_args(["--generations", "1"])
    assert "--generations must be at least 2" in capsys.readouterr().err


def test_both_frameworks_get_the_same_work(vs_trl, tmp_path):
    """TRL counts completions per device batch, rlvr counts prompts: the same completions per
    step, and every shared setting equal; rlvr's config passes its real validation."""
    args = vs_trl.parse_args(["--prompts", "3", "--generations", "4", "--beta", "0.04"])
    data = vs_trl.write_prompts(tmp_path / "prompts.jsonl", args.prompts)
    spec = vs_trl.work_spec(args, tmp_path / "model", data, tmp_path / "out")
    rlvr_raw, trl = vs_trl.rlvr_config(spec), vs_trl.trl_config(spec)

    config = load_config(rlvr_raw, create_host(), allow_code=True)
    t, params = config.training, config.algorithm.params
    assert t.per_device_train_batch_size * t.num_generations == trl["per_device_train_batch_size"]
    assert trl["per_device_train_batch_size"] == 12
    assert t.num_generations == trl["num_generations"]
    assert t.max_completion_length == trl["max_completion_length"]
    assert t.max_steps == trl["max_steps"] == args.warmup + args.steps
    assert (t.temperature, t.top_p, t.learning_rate, t.max_grad_norm) == (
        trl["temperature"],
        trl["top_p"],
        trl["learning_rate"],
        trl["max_grad_norm"],
    )
    assert (params.beta, params.epsilon, params.loss_type, params.num_iterations) == (
        trl["beta"],
        trl["epsilon"],
        trl["loss_type"],
        trl["num_iterations"],
    )
    assert params.scale_rewards == trl["scale_rewards"]
    assert config.backend.name == "hf" and trl["use_vllm"] is False
    assert trl["bf16"] is False and trl["gradient_checkpointing"] is False

    rows = [json.loads(line) for line in data.read_text().splitlines()]
    assert len(rows) == args.prompts  # one step's prompts: every step sees the same ones
    assert [m["role"] for m in rows[0]["prompt"]] == ["system", "user"]


def test_format_reward_takes_text_and_messages(vs_trl):
    full = "<think>2 + 3</think> <answer>5</answer>"
    text_scores = vs_trl.format_reward([full, "5", ""])
    chat_scores = vs_trl.format_reward([[{"role": "assistant", "content": full}]])
    assert 1.0 <= text_scores[0] < 1.01 and chat_scores == text_scores[:1]
    assert 0.0 <= text_scores[1] < 0.01 and text_scores[2] == 0.0
    assert text_scores[1] != text_scores[2]  # the hash separates format-less completions


def test_summarize_drops_warmup_and_splits_the_step(vs_trl):
    def step(s: float, g: float, sc: float, tokens: int) -> dict[str, float]:
        return {
            "step": s,
            "generation": g,
            "scoring": sc,
            "completions": 4,
            "prompt_tokens": 40,
            "completion_tokens": tokens,
        }

    out = vs_trl.summarize([step(100, 90, 1, 8), step(4, 1, 1, 16), step(6, 3, 1, 32)], warmup=1)
    assert out["step"] == 5 and out["generation"] == 2 and out["scoring"] == 1
    assert out["training"] == 2
    assert out["mean_length"] == 6  # 24 tokens / 4 completions
    assert out["tokens_per_s"] == 24 / 5  # completion tokens per second of a whole step


def test_on_cuda_both_train_float32_weights_in_bfloat16(vs_trl, tmp_path, monkeypatch, capsys):
    """``--device cuda``: rlvr's bfloat16 compute dtype (float32 trained weights) against TRL's
    float32 model with bf16 autocast, fused AdamW in both; refused where torch sees no GPU."""
    import torch

    args = vs_trl.parse_args([])
    assert args.device == "cpu"
    cpu = vs_trl.work_spec(args, tmp_path / "model", tmp_path / "d.jsonl", tmp_path / "out")
    assert vs_trl.rlvr_config(cpu)["model"]["dtype"] == "float32"
    assert vs_trl.trl_config(cpu)["use_cpu"] is True

    # --precision bfloat16 on a CPU: the GPU's precision, measurable here (with --trace-memory)
    args = vs_trl.parse_args(["--precision", "bfloat16"])
    spec = vs_trl.work_spec(args, tmp_path / "model", tmp_path / "d.jsonl", tmp_path / "out")
    assert (
        load_config(vs_trl.rlvr_config(spec), create_host(), allow_code=True).model.dtype
        == "bfloat16"
    )
    trl = vs_trl.trl_config(spec)
    assert (trl["bf16"], trl["use_cpu"], trl["optim"]) == (True, True, "adamw_torch")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args = vs_trl.parse_args(["--device", "cuda"])
    assert args.precision == "bfloat16"
    spec = vs_trl.work_spec(args, tmp_path / "model", tmp_path / "d.jsonl", tmp_path / "out")
    rlvr_raw, trl = vs_trl.rlvr_config(spec), vs_trl.trl_config(spec)
    assert load_config(rlvr_raw, create_host(), allow_code=True).model.dtype == "bfloat16"
    assert (trl["bf16"], trl["fp16"], trl["use_cpu"]) == (True, False, False)
    assert trl["model_init_kwargs"] == {"dtype": "float32"}
    assert trl["optim"] == "adamw_torch_fused"

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        vs_trl.parse_args(["--device", "cuda"])
    assert "torch sees no GPU" in capsys.readouterr().err


def test_traced_memory_is_the_peak_of_live_tensors(vs_trl):
    """``--trace-memory``: the peak of live tensor bytes over a worker's run, and what was alive
    then, by the operation that allocated it (a CPU stand-in for max_memory_allocated)."""
    import torch

    def worker(spec):
        a = torch.ones(1024, 1024)  # 4 MiB
        b = torch.ones(2048, 1024) * 2  # 8 MiB (the ones are a temporary: 8 MiB more)
        del a
        c = torch.zeros(512, 1024)  # 2 MiB: after the peak
        return {"sum": float(b.sum() + c.sum())}

    result = vs_trl.traced(worker, {"device": "cpu"})
    assert result["sum"] == 2 * 2048 * 1024
    assert result["peak_traced_mb"] == pytest.approx(20.0, abs=0.01)  # a + the ones + b
    at_peak = result["traced_at_peak_mb"]
    assert at_peak.get("aten::ones", 0) == pytest.approx(12.0, abs=0.01)
    assert at_peak.get("aten::mul", 0) == pytest.approx(8.0, abs=0.01)


def test_rlvr_rows_runs_rlvr_without_packing(vs_trl, tmp_path):
    """``--rlvr-rows``: a third run, rlvr with every completion's prompt in its own row
    (``training.pack_prompts: false``)."""
    assert vs_trl.parse_args(["--rlvr-rows"]).rlvr_rows
    args = vs_trl.parse_args([])
    assert not args.rlvr_rows
    spec = vs_trl.work_spec(args, tmp_path, tmp_path, tmp_path)
    assert spec["pack"] is True
    assert (
        load_config(vs_trl.rlvr_config(spec), create_host(), allow_code=True).training.pack_prompts
        is True
    )
    rows = {**spec, "pack": False}
    assert (
        load_config(vs_trl.rlvr_config(rows), create_host(), allow_code=True).training.pack_prompts
        is False
    )
