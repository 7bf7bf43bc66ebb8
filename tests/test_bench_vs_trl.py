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


# --------------------------------------------------------------------------- vs_trl_curves.py

CURVES = BENCH.parent / "vs_trl_curves.py"


@pytest.fixture(scope="module")
def curves(vs_trl):
    """bench/vs_trl_curves.py, which imports its sibling ``vs_trl`` (as the bench runs it)."""
    sys.path.insert(0, str(BENCH.parent))
    spec = importlib.util.spec_from_file_location("bench_vs_trl_curves", CURVES)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(spec.name, None)
        sys.modules.pop("vs_trl", None)
        sys.path.remove(str(BENCH.parent))


def test_curves_parse_args_rejects_bad_input(curves, capsys):
    args = curves.parse_args(["--seeds", "3", "--steps", "50", "--last", "10"])
    assert (args.seeds, args.steps, args.last, args.warmup_steps) == (3, 50, 10, 20)
    for argv, message in (
        (["--seeds", "1"], "--seeds must be at least 2"),
        (["--steps", "10", "--last", "11", "--warmup-steps", "0"], "--last 11 is more than"),
        (["--steps", "20"], "--warmup-steps must be 0 or more and below --steps (20)"),
        (["--generations", "1"], "--generations must be at least 2"),
        (["--block", "0"], "--block must be at least 1"),
        (["--first-seed", "-1"], "--first-seed must be 0 or more"),
    ):
        with pytest.raises(SystemExit):
            curves.parse_args(argv)
        assert message in capsys.readouterr().err


def test_curves_train_both_with_the_same_settings(curves, vs_trl, tmp_path):
    """The curves' run: vs_trl's mapping with two reward functions, the quickstart's schedule
    and a seed; rlvr's config passes its real validation (the callable's file and functions
    exist) and every shared setting equals TRL's."""
    args = curves.parse_args(["--seeds", "2", "--steps", "40", "--warmup-steps", "5"])
    spec = curves.curve_spec(args, tmp_path / "model", tmp_path / "d.jsonl", tmp_path / "o", 3)
    raw, trl = vs_trl.rlvr_config(spec), vs_trl.trl_config(spec)
    config = load_config(raw, create_host(), allow_code=True)
    t, params = config.training, config.algorithm.params
    assert t.seed == trl["seed"] == 3
    assert t.max_steps == trl["max_steps"] == 40
    assert t.lr_scheduler_type == trl["lr_scheduler_type"] == "constant_with_warmup"
    assert t.warmup_steps == trl["warmup_steps"] == 5
    assert t.learning_rate == trl["learning_rate"] == 1e-3
    assert t.per_device_train_batch_size * t.num_generations == trl["per_device_train_batch_size"]
    assert trl["per_device_train_batch_size"] == 16 * 8 and trl["steps_per_generation"] == 1
    assert t.max_completion_length == trl["max_completion_length"] == 8
    assert params.beta == trl["beta"] == 0.0
    assert params.loss_type == trl["loss_type"] == "grpo"
    assert params.num_iterations == trl["num_iterations"] == 1
    assert t.temperature == trl["temperature"] == 1.0
    assert config.model.dtype == "float32" and trl["bf16"] is False and trl["use_cpu"] is True
    # rlvr's reward labels are TRL's function names: rewards/<name>/mean in both logs
    assert [r.name for r in config.rewards] == ["callable", "callable"]
    assert [r.label for r in config.rewards] == vs_trl.reward_names(spec)
    assert vs_trl.reward_names(spec) == ["answer_reward", "format_reward"]
    assert all(r.weight == 1.0 for r in config.rewards)
    # the TRL worker loads the very functions rlvr's callable names
    fn = vs_trl.load_reward(spec["rewards"][0])
    assert fn(completions=["<answer>7</answer>"], answer=["7"]) == [1.0]

    default = vs_trl.work_spec(vs_trl.parse_args([]), tmp_path, tmp_path, tmp_path)
    assert vs_trl.trl_config(default)["lr_scheduler_type"] == "constant"  # the timing bench's
    assert vs_trl.reward_names(default) == ["format_reward"]


def test_curves_rewards_score_text_and_messages(curves):
    texts = [
        "<answer>7</answer>",
        " <answer> 7 </answer>\n",
        "<answer>7</answer></answer>",
        "<answer>6</answer>",
        "7",
        "<answer></answer>",
    ]
    assert curves.answer_reward(texts, answer=["7"] * 6) == [1, 1, 1, 0, 0, 0]
    assert curves.format_reward(texts) == [1, 1, 0, 1, 0, 0]
    chat = [[{"role": "assistant", "content": "<answer>3</answer>"}]]
    assert curves.answer_reward(chat, answer=["3"]) == [1.0]
    assert curves.format_reward(chat) == [1.0]


def test_t_distribution_matches_the_tables(curves):
    assert curves.t_cdf(0.0, 5) == pytest.approx(0.5)
    assert curves.t_cdf(1.0, 1) == pytest.approx(0.75)  # Cauchy: 1/2 + atan(1)/pi
    for df, q in ((1, 12.706), (2, 4.303), (4, 2.776), (6, 2.447), (30, 2.042)):
        assert curves.t_quantile(0.975, df) == pytest.approx(q, abs=1e-3)
    assert curves.t_quantile(0.975, 1e6) == pytest.approx(1.960, abs=1e-3)
    assert curves.t_quantile(0.025, 4) == pytest.approx(-2.776, abs=1e-3)


def test_welch_interval_by_hand(curves):
    # means 2.5 and 3.5, variances 5/3 each: se = sqrt(2 * 5/12) = 0.91287, df = 6
    w = curves.welch([1.0, 2.0, 3.0, 4.0], [2.0, 3.0, 4.0, 5.0])
    assert w["diff"] == pytest.approx(-1.0)
    assert w["se"] == pytest.approx(0.912871, abs=1e-6)
    assert w["df"] == pytest.approx(6.0)
    assert (w["lo"], w["hi"]) == pytest.approx(
        (-1 - 2.4469 * 0.912871, -1 + 2.4469 * 0.912871), abs=1e-3
    )
    # unequal variances and sizes: va = 1/3 (n 3), vb = 8/2... b = [0, 4]: var 8, /2 = 4
    w = curves.welch([1.0, 2.0, 3.0], [0.0, 4.0])
    assert w["se"] == pytest.approx((1 / 3 + 4) ** 0.5)
    assert w["df"] == pytest.approx((1 / 3 + 4) ** 2 / ((1 / 3) ** 2 / 2 + 4**2 / 1))
    same = curves.welch([1.0, 1.0], [1.0, 1.0])
    assert (same["lo"], same["hi"]) == (0.0, 0.0)


def test_bootstrap_interval_by_hand(curves):
    # each mean of two 0/1 draws is 0, .5 or 1 (1/4, 1/2, 1/4): the difference is -1 with
    # probability 1/16 > 2.5%, so the 95% interval is [-1, 1]
    assert curves.bootstrap([0.0, 1.0], [0.0, 1.0]) == (-1.0, 1.0)
    assert curves.bootstrap([2.0, 2.0, 2.0], [0.5, 0.5]) == (1.5, 1.5)
    lo, hi = curves.bootstrap([0.0, 1.0, 2.0, 3.0], [10.0, 11.0, 12.0, 13.0])
    assert -13.0 <= lo < -10.0 < hi <= -7.0


def test_compare_curves_summaries_and_verdict(curves):
    """Per seed: the last-K mean and the mean over all steps; rlvr - TRL with its interval,
    "agree" exactly when Welch's interval holds 0."""
    assert curves.blocks([1.0, 2.0, 3.0, 4.0, 5.0], 2) == [1.5, 3.5, 5.0]
    assert curves.summaries([0.0, 0.0, 1.0, 2.0], 2) == {"last": 1.5, "auc": 0.75}
    rlvr = [[0.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 0.5], [0.0, 0.0, 0.5, 1.0]]
    trl = [[0.0, 0.0, 1.0, 0.5], [0.0, 0.5, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]]
    out = curves.compare_curves({"rlvr": rlvr, "trl": trl}, last=2)
    assert out["last"]["values"] == {"rlvr": [1.0, 0.75, 0.75], "trl": [0.75, 1.0, 1.0]}
    assert out["last"]["diff"] == pytest.approx(2.5 / 3 - 2.75 / 3)
    assert out["auc"]["values"]["rlvr"] == [0.5, 0.625, 0.375]
    assert out["last"]["agree"] and out["auc"]["agree"]
    assert out["last"]["width"] == pytest.approx(out["last"]["welch"][1] - out["last"]["welch"][0])
    far = curves.compare_curves(
        {"rlvr": rlvr, "trl": [[2.0, 2.0, 2.0, 2.0]] * 2 + [[2.0, 2.0, 2.0, 1.9]]}, last=2
    )
    assert not far["last"]["agree"] and far["last"]["welch"][1] < 0
    table = curves.block_table({"rlvr": rlvr, "trl": trl}, 2)
    assert table[2] == "| 1-2 | 0.167 ± 0.289 | 0.083 ± 0.144 | +0.083 |"


def test_rlvr_set_mismatches_rlvr_only(curves, vs_trl, tmp_path, capsys):
    """``--rlvr-set``: a deliberate mismatch on rlvr's side (the positive control that shows the
    comparison notices a real difference); TRL's config stays as it was."""
    args = curves.parse_args(
        [
            "--rlvr-set",
            "training.learning_rate=5e-4",
            "--rlvr-set",
            "algorithm.params.loss_type=dapo",
        ]
    )
    assert args.rlvr_set == {"training.learning_rate": 5e-4, "algorithm.params.loss_type": "dapo"}
    spec = curves.curve_spec(args, tmp_path / "m", tmp_path / "d.jsonl", tmp_path / "o", 0)
    config = load_config(vs_trl.rlvr_config(spec), create_host(), allow_code=True)
    assert config.training.learning_rate == 5e-4
    assert config.algorithm.params.loss_type == "dapo"
    trl = vs_trl.trl_config(spec)
    assert (trl["learning_rate"], trl["loss_type"]) == (1e-3, "grpo")
    with pytest.raises(SystemExit):
        curves.parse_args(["--rlvr-set", "training.learning_rate"])
    assert "is not KEY=VALUE" in capsys.readouterr().err


def test_trl_from_takes_an_earlier_run_with_the_same_settings(curves, tmp_path, capsys):
    earlier = {
        "settings": vars(curves.parse_args(["--seeds", "2", "--steps", "30", "--last", "5"])),
        "curves": {m: {"rlvr": [[0.0]], "trl": [[0.5] * 30] * 2} for m in curves.METRICS},
        "mean_length": {"rlvr": [4.0], "trl": [4.0, 4.1]},
        "seconds_per_step": {"rlvr": [0.1], "trl": [0.3, 0.3]},
    }
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps(earlier))
    args = curves.parse_args(["--seeds", "2", "--steps", "30", "--trl-from", str(path)])
    assert args.trl_from_run["curves"]["reward"]["trl"] == [[0.5] * 30] * 2
    with pytest.raises(SystemExit):
        curves.parse_args(["--seeds", "2", "--steps", "40", "--trl-from", str(path)])
    assert "ran with other steps" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # fresh seeds are another run
        curves.parse_args(
            ["--seeds", "2", "--steps", "30", "--first-seed", "8", "--trl-from", str(path)]
        )
    assert "ran with other first_seed" in capsys.readouterr().err
    path.write_text(json.dumps({"settings": {}}))
    with pytest.raises(SystemExit):
        curves.parse_args(["--trl-from", str(path)])
    assert "not a --json of this script" in capsys.readouterr().err
