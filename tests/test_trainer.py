"""End-to-end tests of the training core (data, checkpoint, metrics, trainer) on a tiny model.

Every run uses a random tiny Qwen2 model built once per session, a 16-row arithmetic dataset,
2 prompts x 4 completions of at most 12 tokens, so a training run takes a few seconds on CPU.
The ``toy`` reward (an in-process plugin) gives completions of one prompt different scores, so
advantages and gradients are not all zero.
"""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from rlvr.api.errors import ConfigWarning
from rlvr.api.host import create_host
from rlvr.api.registration import Params, Reward
from rlvr.config.schema import load_config
from rlvr.data.prompts import DataError, PromptSampler, PromptSet, check_fields
from rlvr.outputs.checkpoint import (
    COMPLETE,
    MARK,
    latest_checkpoint,
    list_checkpoints,
    load_file,
    read_state,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from rlvr.outputs.metrics import CORE_KEYS, TIMING_KEYS, read_metrics
from rlvr.plugin import hookimpl
from rlvr.training.callbacks import ReportError
from rlvr.training.launch import TrainingError, train

TRAIN_SECTIONS = ("model", "data", "rewards", "algorithm", "backend")
ALGORITHMS = ["grpo", "dapo", "dr_grpo", "rloo", "ppo"]


# --------------------------------------------------------------------------- a test reward


class ToyParams(Params):
    #: groups of prompts whose answer is odd all score 0 (dynamic sampling drops them).
    flat_if_odd: bool = False


def _toy(params: ToyParams, sample) -> float:
    text = sample.completion
    if params.flat_if_odd and int(sample.row["answer"]) % 2:
        return 0.0
    digits = sum(ch.isdigit() for ch in text) / max(len(text), 1)
    return digits + (1.0 if sample.row["answer"] in text else 0.0) + 0.01 * len(text)


def toy_factory(params: ToyParams):
    return functools.partial(_toy, params)


class ToyPlugin:
    @hookimpl
    def rlvr_register_rewards(self, register):
        register(
            Reward(
                name="toy",
                params=ToyParams,
                factory=toy_factory,
                description="digits in the completion, plus 1 when it contains the answer",
                fields=lambda params: ("answer",),
            )
        )


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    from rlvr.model.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def dataset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "arith.jsonl"
    rows = [
        {"prompt": f"What is {a} + {b}?", "answer": str(a + b), "id": i}
        for i, (a, b) in enumerate((a, b) for a in range(1, 5) for b in range(1, 5))
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture
def host():
    return create_host(plugins=[ToyPlugin()])


@pytest.fixture
def make_config(tiny_model, dataset, host, tmp_path):
    def make(
        algorithm: str = "grpo",
        algo_params: dict | None = None,
        rewards: list | None = None,
        data: dict | None = None,
        output: str = "run",
        using=None,
        model: dict | None = None,
        environment: dict | None = None,
        **training,
    ):
        t = {
            "output_dir": str(tmp_path / output),
            "max_steps": 3,
            "per_device_train_batch_size": 2,
            "num_generations": 4,
            "max_completion_length": 12,
            "max_prompt_length": 64,
            "learning_rate": 1e-3,
            "reward_workers": 0,
            "seed": 0,
            "save_steps": 100,
            "log_samples_steps": 2,
        }
        t.update(training)
        raw = {
            "model": {"name_or_path": str(tiny_model), **(model or {})},
            "data": {"path": str(dataset), **(data or {})},
            "rewards": rewards
            if rewards is not None
            else [{"name": "toy"}, {"name": "numbers", "weight": 0.5}, {"name": "format"}],
            "algorithm": {"name": algorithm, "params": algo_params or {}},
            "backend": {"name": "hf"},
            "training": t,
        }
        if environment is not None:
            raw["environment"] = environment
        # Some tests use the callable reward (code the test wrote): allowed, as --allow-code.
        return load_config(raw, using or host, require=TRAIN_SECTIONS, allow_code=True)

    return make


def run(config, host, **kwargs):
    return train(config, host, progress=False, **kwargs)


def comparable(metrics: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if k not in TIMING_KEYS} for m in metrics]


def weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


# --------------------------------------------------------------------------- each algorithm


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_three_steps_write_metrics(algorithm, make_config, host):
    config = make_config(algorithm)
    last = run(config, host)
    out = Path(config.training.output_dir)
    lines = read_metrics(out)
    assert [m["step"] for m in lines] == [1, 2, 3]
    assert last == lines[-1] or comparable([last]) == comparable([lines[-1]])
    for m in lines:
        for key in CORE_KEYS:
            assert key in m, key
        for label in ("toy", "numbers", "format"):
            for stat in ("mean", "std", "none_count", "timeouts", "errors"):
                assert f"rewards/{label}/{stat}" in m
        for key, value in m.items():
            if isinstance(value, float | int):
                assert math.isfinite(value), (key, value)
            else:
                assert value is not None, key
        assert m["skipped"] == 0
        assert m["generation_rounds"] >= 1
        # every kept completion counts its prompt (at least one token each)
        assert m["prompt_tokens"] >= m["groups_kept"] * config.training.num_generations > 0
        assert m["cpu_time"] > 0
        assert 0 <= m["zero_std_frac"] <= 1
        assert 1 <= m["completion_length/min"] <= m["completion_length/max"] <= 12
    if algorithm in ("grpo", "ppo"):  # these load a reference model by default
        assert all("kl" in m for m in lines)
    if algorithm in ("grpo", "dapo", "rloo", "dr_grpo"):
        prefix = f"algo/{algorithm}/"
        assert all(f"{prefix}clip_frac_low" in m and f"{prefix}clip_frac_high" in m for m in lines)
    # One namespace: core keys, rewards/<label>/..., algo/<name>/... and nothing else.
    core = set(CORE_KEYS) | {"kl", "groups_kept", "num_tokens", "value_grad_norm"}
    core |= {"generation_time", "scoring_time", "training_time", "weight_sync_time"}
    for m in lines:
        for key in m:
            assert key in core or key.startswith(("rewards/", f"algo/{algorithm}/")), key
    assert any(m["grad_norm"] > 0 for m in lines)
    # The final checkpoint loads with from_pretrained.
    final = latest_checkpoint(out)
    assert final is not None and final.name == "checkpoint-3"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(final)
    AutoTokenizer.from_pretrained(final)
    assert (final / "optimizer.pt").is_file() and (final / "rng_state.pt").is_file()
    assert (final / "value_model.pt").is_file() == (algorithm == "ppo")
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert {s["step"] for s in samples} == {1, 2}  # step 1 and every log_samples_steps
    assert {"prompt", "completion", "reward", "rewards", "row"} <= set(samples[0])


# --------------------------------------------------------------------------- resume


def _interrupt_after(monkeypatch, step: int) -> None:
    """Send ourselves SIGINT (Ctrl-C) right after step ``step`` is logged."""
    from rlvr.outputs.metrics_logger import MetricsLogger

    original = MetricsLogger.log

    def log(self, metrics):
        original(self, metrics)
        if metrics["step"] == step:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(MetricsLogger, "log", log)


def _keyboard_interrupt_in_step(monkeypatch, step: int) -> None:
    """Raise KeyboardInterrupt while step ``step`` scores its completions (mid-rollout)."""
    from rlvr.rewards.scoring import Scorer

    original = Scorer.score
    calls = {"n": 0}

    def score(self, samples, **kwargs):
        calls["n"] += 1
        if calls["n"] == step:
            raise KeyboardInterrupt
        return original(self, samples, **kwargs)

    monkeypatch.setattr(Scorer, "score", score)


@pytest.mark.parametrize(("algorithm", "how"), [("grpo", "sigint"), ("ppo", "keyboard_interrupt")])
def test_resume_gives_the_same_metrics(algorithm, how, make_config, host, monkeypatch, capsys):
    """An interrupted and resumed run logs exactly what an uninterrupted one does (and says
    which checkpoint it resumed from, on the console and in its first line of metrics).

    ``sigint``: Ctrl-C after step 2 finishes the step, saves checkpoint-2 and returns.
    ``keyboard_interrupt``: an interrupt in the middle of step 3's rollout forgets step 3,
    saves checkpoint-2 and re-raises. GRPO has a reference model, PPO a value model too.
    """
    whole = make_config(algorithm, output="whole", max_steps=4, save_steps=3)
    run(whole, host)
    expected = read_metrics(whole.training.output_dir)

    split = make_config(algorithm, output="split", max_steps=4, save_steps=3)
    with monkeypatch.context() as m:
        if how == "sigint":
            _interrupt_after(m, 2)
            run(split, host)
        else:
            _keyboard_interrupt_in_step(m, 3)
            with pytest.raises(KeyboardInterrupt):
                run(split, host)
    out = Path(split.training.output_dir)
    assert [x["step"] for x in read_metrics(out)] == [1, 2]
    assert latest_checkpoint(out).name == "checkpoint-2"
    capsys.readouterr()
    run(split, host, resume=True)
    assert f"rlvr: resuming from {out / 'checkpoint-2'} (step 2 of 4)" in capsys.readouterr().err
    got = read_metrics(out)
    assert [x["step"] for x in got] == [1, 2, 3, 4]
    assert [x.get("resumed_from") for x in got] == [None, None, 2, None]
    assert comparable(got) == comparable(expected)
    a = weights(Path(whole.training.output_dir) / "checkpoint-4")
    b = weights(out / "checkpoint-4")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_needs_a_checkpoint_and_a_new_run_needs_a_new_dir(make_config, host, tmp_path):
    config = make_config(output="empty")
    with pytest.raises(TrainingError, match="no complete checkpoint"):
        run(config, host, resume=True)
    out = Path(config.training.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").write_text('{"step": 1}\n')  # not written by rlvr: never replaced
    with pytest.raises(TrainingError, match="holds metrics.jsonl, which rlvr did not create"):
        run(config, host)
    (out / "metrics.jsonl").unlink()
    run(config, host)
    with pytest.raises(TrainingError, match="already holds a run"):
        run(config, host)


def test_resume_names_what_the_config_changed(make_config, host, caplog):
    """A resume with another config says what differs; one that makes the weights another
    model's, or whose optimizer no longer fits, stops with what to do, never a traceback."""
    first = make_config(output="changed", max_steps=2, save_steps=2)
    run(first, host)
    out = Path(first.training.output_dir)
    more = make_config(output="changed", max_steps=3, save_steps=2, learning_rate=5e-4)
    with pytest.warns(ConfigWarning, match="resuming with a config that differs") as seen:
        run(more, host, resume=True)
    warned = " ".join(str(w.message) for w in seen)
    assert "training.learning_rate: 0.001 -> 0.0005" in warned
    assert "training.max_steps: 2 -> 3" in warned
    assert "rlvr_config.yaml" in warned  # where the original settings still are

    lora = make_config(output="changed", max_steps=4, model={"lora": {"r": 4}})
    with pytest.raises(
        TrainingError, match="its adapters were saved for another LoRA setup"
    ) as info:
        run(lora, host, resume=True)
    assert "model.lora" in str(info.value) and "training.output_dir" in str(info.value)

    ppo = make_config("ppo", output="changed", max_steps=4)  # adds a value model
    with pytest.raises(TrainingError, match="does not fit this run's") as info:
        run(ppo, host, resume=True)
    assert "rlvr_config.yaml" in str(info.value)
    assert latest_checkpoint(out).name == "checkpoint-3"  # nothing already done was lost


_KILL_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from rlvr.config.schema import load_config
    from rlvr.api.host import create_host
    from rlvr.training.launch import train
    host = create_host()
    config = load_config(json.loads(sys.argv[1]), host,
                         require=("model", "data", "rewards", "algorithm", "backend"))
    train(config, host, progress=False)
    """
)


@pytest.mark.slow
def test_sigkill_during_a_checkpoint_write(tiny_model, dataset, tmp_path):
    out = tmp_path / "killed"
    raw = {
        "model": {"name_or_path": str(tiny_model)},
        "data": {"path": str(dataset)},
        "rewards": [{"name": "numbers"}, {"name": "format"}],
        "algorithm": {"name": "grpo", "params": {"beta": 0.0}},
        "backend": {"name": "hf"},
        "training": {
            "output_dir": str(out),
            "max_steps": 5,
            "save_steps": 2,
            "per_device_train_batch_size": 2,
            "num_generations": 2,
            "max_completion_length": 8,
            "reward_workers": 0,
            "seed": 0,
        },
    }
    env = {**os.environ, "RLVR_TEST_CHECKPOINT_SLEEP": "4:300", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILL_SCRIPT, json.dumps(raw)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    tmp_dir = out / ".checkpoint-4.tmp"
    deadline = time.monotonic() + 240
    try:
        # The hook sleeps after every file is written and before the COMPLETE marker.
        while not (tmp_dir / "trainer_state.json").is_file():
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the run never reached checkpoint 4"
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert tmp_dir.is_dir() and not (tmp_dir / COMPLETE).exists()
    assert not (out / "checkpoint-4").exists()
    assert latest_checkpoint(out) == out / "checkpoint-2"
    assert [m["step"] for m in read_metrics(out)] == [1, 2, 3, 4]

    host = create_host()
    config = load_config(raw, host, require=TRAIN_SECTIONS)
    run(config, host, resume=True)
    assert [m["step"] for m in read_metrics(out)] == [1, 2, 3, 4, 5]
    assert [p.name for p in list_checkpoints(out)] == [
        "checkpoint-2",
        "checkpoint-4",
        "checkpoint-5",
    ]
    assert not tmp_dir.exists()


# --------------------------------------------------------------------------- failures


def test_missing_fields_are_reported_before_the_model_loads(make_config, host, tmp_path):
    rows = [{"question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(10)]
    for row in rows[:3]:
        del row["answer"]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    config = make_config(data={"path": str(path)})
    config = config.model_copy(
        update={"model": config.model.model_copy(update={"name_or_path": str(tmp_path / "none")})}
    )
    with pytest.raises(DataError) as info:
        run(config, host)
    msg = str(info.value)
    assert "'prompt' needed by the prompt (data.prompt_field) is not in the dataset" in msg
    assert "columns: answer, question" in msg
    assert "'answer' needed by reward 'toy' (rewards[0]) is missing in 3 of 10 rows" in msg
    assert "'answer' needed by reward 'numbers' (rewards[1]) is missing in 3 of 10 rows" in msg


def test_nan_loss_skips_updates_then_stops_with_a_checkpoint(make_config, host, monkeypatch):
    from rlvr.algorithms.base import PolicyGradient
    from rlvr.api.runtime import LossOutput

    original = PolicyGradient.loss

    def nan_loss(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        return LossOutput(loss=out.loss * float("nan"), metrics=out.metrics)

    monkeypatch.setattr(PolicyGradient, "loss", nan_loss)
    config = make_config("grpo", max_steps=6, max_bad_steps=2)
    with pytest.raises(TrainingError, match="max_bad_steps=2"):
        run(config, host)
    out = Path(config.training.output_dir)
    lines = read_metrics(out)
    assert [m["step"] for m in lines] == [1, 2]
    assert all(m["skipped"] == 1 and m["loss"] is None for m in lines)
    assert latest_checkpoint(out).name == "checkpoint-2"
    before = weights(Path(config.model.name_or_path))
    after = weights(out / "checkpoint-2")
    assert all(torch.equal(before[k], after[k]) for k in after)


def test_missing_report_package_fails_before_loading(make_config, host, tmp_path):
    import importlib.util

    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed")
    config = make_config(report_to=["wandb"])
    config = config.model_copy(
        update={"model": config.model.model_copy(update={"name_or_path": str(tmp_path / "no")})}
    )
    with pytest.raises(ReportError, match=r"pip install 'rlvr\[wandb\]'"):
        run(config, host)


def test_tensorboard_gets_the_metrics(make_config, host):
    config = make_config("grpo", max_steps=1, report_to="tensorboard")
    run(config, host)
    events = list((Path(config.training.output_dir) / "tensorboard").glob("events.*"))
    assert events and events[0].stat().st_size > 0


_BAD_REWARD = textwrap.dedent(
    """
    import os, time

    def factory(params):
        def reward(sample):
            answer = int(sample.row["answer"])
            if answer % 4 == 1:
                time.sleep(3600)  # hangs: killed after the entry's timeout
            if answer % 4 == 3:
                os._exit(1)  # takes its worker process down
            return 1.0
        return reward
    """
)


@pytest.mark.slow  # worker restarts: ~10 s on an idle 2-core machine, more under load
def test_rewards_that_hang_or_crash_never_stop_training(make_config, tmp_path, monkeypatch):
    """In worker processes, a hanging reward times out and a crashing one is an error: both
    give the fallback, are counted in the metrics, and training goes on."""
    (tmp_path / "rlvr_test_bad_reward.py").write_text(_BAD_REWARD)
    monkeypatch.syspath_prepend(str(tmp_path))
    import rlvr_test_bad_reward

    class BadPlugin:
        @hookimpl
        def rlvr_register_rewards(self, register):
            register(
                Reward(
                    name="bad",
                    params=ToyParams,
                    factory=rlvr_test_bad_reward.factory,
                    description="hangs or crashes on some rows",
                )
            )

    host = create_host(plugins=[ToyPlugin(), BadPlugin()])
    config = make_config(
        rewards=[{"name": "toy"}, {"name": "bad", "timeout": 0.5, "fallback": -1.0}],
        max_steps=2,
        num_generations=2,
        reward_workers=2,
        data={"shuffle": False},  # rows 0-3: answers 2, 3, 4, 5
        using=host,
    )
    lines = _run_lines(config, host)
    assert [m["step"] for m in lines] == [1, 2]
    assert sum(m["rewards/bad/timeouts"] for m in lines) == 2  # answer 5, 2 completions
    assert sum(m["rewards/bad/errors"] for m in lines) == 2  # answer 3
    assert lines[0]["rewards/bad/mean"] == pytest.approx((1 + 1 - 1 - 1) / 4)


def _run_lines(config, host):
    run(config, host)
    return read_metrics(config.training.output_dir)


def test_max_steps_from_epochs(make_config, host):
    config = make_config(max_steps=-1, num_train_epochs=0.25)  # 16 rows * 0.25 / 2 per step
    _run_lines(config, host)
    assert [m["step"] for m in read_metrics(config.training.output_dir)] == [1, 2]


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_step_keys_count_steps_whatever_num_iterations(schedule, make_config, host):
    """#43 item 7: max_steps, warmup_steps, save_steps and eval_steps all count steps (one
    generation round, one line of metrics.jsonl), with 2 optimizer updates a step: the
    learning rate logged at the start of each step warms up over 2 steps, peaks at step 3 and
    the schedule ends with step 4; checkpoints and evaluations fall on the steps named."""
    config = make_config(
        algo_params={"num_iterations": 2},
        max_steps=4,
        warmup_steps=2,
        lr_scheduler_type=schedule,
        save_steps=2,
        eval_steps=2,
        eval_limit=2,
    )
    lines = _run_lines(config, host)
    out = Path(config.training.output_dir)
    train_lines = [m for m in lines if "loss" in m]
    assert [m["step"] for m in train_lines] == [1, 2, 3, 4]
    assert all(m["skipped"] == 0 for m in train_lines)
    peak = config.training.learning_rate
    decayed = 0.5 if schedule == "linear" else math.cos(math.pi / 4) ** 2  # half-way down
    expected = [0.0, 0.5 * peak, peak, decayed * peak]
    assert [m["learning_rate"] for m in train_lines] == pytest.approx(expected, abs=1e-12)
    state = torch.load(out / "checkpoint-4" / "scheduler.pt", weights_only=True)
    assert state["last_epoch"] == 4 * 2  # every update of the 4 steps: the schedule's end
    assert state["_last_lr"][0] == pytest.approx(0.0, abs=1e-12)
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-2", "checkpoint-4"]
    assert [m["step"] for m in lines if "eval/reward_mean" in m] == [0, 2, 4]


# --------------------------------------------------------------------------- dynamic sampling


def test_dynamic_sampling_generates_more_groups(make_config, host):
    config = make_config(
        "dapo",
        algo_params={"max_generation_rounds": 6},
        rewards=[{"name": "toy", "params": {"flat_if_odd": True}}],
        max_steps=2,
    )
    run(config, host)
    lines = read_metrics(config.training.output_dir)
    assert sum(m["groups_filtered"] for m in lines) > 0
    assert any(m["generation_rounds"] > 1 for m in lines)
    assert all(m["groups_kept"] == 2 for m in lines)


@pytest.mark.parametrize(
    "lora", [None, {"r": 4, "target_modules": ["q_proj", "v_proj"], "layers_to_transform": [1]}]
)
def test_a_step_where_dynamic_sampling_keeps_nothing_changes_nothing_and_goes_on(
    lora, make_config, host, tiny_model, caplog
):
    # `format` scores every completion of the random model 0: every group is flat. With a KL
    # term the step also has reference passes to make (over no rows); LoRA on the top layer
    # adds the shared frozen-layer pass.
    config = make_config(
        "dapo",
        algo_params={"max_generation_rounds": 2, "beta": 0.1},
        rewards=[{"name": "format"}],
        model={"lora": lora},
    )
    with caplog.at_level("WARNING", logger="rlvr.rollout.runner"):
        run(config, host)
    lines = read_metrics(config.training.output_dir)
    assert [m["step"] for m in lines] == [1, 2, 3]  # the run went on to max_steps
    assert all(m["groups_kept"] == 0 and m["generation_rounds"] == 2 for m in lines)
    assert all(m["groups_filtered"] == 4 and m["num_tokens"] == 0 for m in lines)
    said = [r.getMessage() for r in caplog.records if "kept no group" in r.getMessage()]
    assert len(said) == 3 and "changes no weight" in said[0]
    assert "max_generation_rounds" in said[0] and "dynamic_sampling: false" in said[0]
    if lora is None:
        before = weights(tiny_model)
        after = weights(list_checkpoints(Path(config.training.output_dir))[-1])
        shared = before.keys() & after.keys()
        assert shared and all(torch.equal(before[k], after[k]) for k in shared)


# --------------------------------------------------------------------------- accumulation


@pytest.mark.parametrize("algorithm", ["grpo", "dapo", "dr_grpo"])
def test_gradient_accumulation_equals_one_big_batch(algorithm, make_config, host):
    common = {"max_steps": 1, "optim": "sgd", "learning_rate": 0.5, "max_grad_norm": 1e9}
    # float32 compute on every device: under bfloat16 autocast (a GPU's default) rounding
    # depends on the micro-batch's shape (on an H200 the weights then differed by up to 1e-4).
    common["model"] = {"dtype": "float32"}
    # DAPO: no dynamic sampling, and truncated completions (all of them, from a random model)
    # must count, or there is no gradient to compare.
    params = (
        {"dynamic_sampling": False, "mask_truncated_completions": False}
        if algorithm == "dapo"
        else {}
    )
    big = make_config(algorithm, params, output="big", per_device_train_batch_size=2, **common)
    small = make_config(
        algorithm,
        params,
        output="small",
        per_device_train_batch_size=1,
        gradient_accumulation_steps=2,
        **common,
    )
    m_big, m_small = run(big, host), run(small, host)
    assert m_big["reward"] == m_small["reward"]  # the same rollouts
    assert m_big["loss"] == pytest.approx(m_small["loss"], rel=1e-5, abs=1e-7)
    assert m_big["grad_norm"] == pytest.approx(m_small["grad_norm"], rel=1e-4)
    assert m_big["grad_norm"] > 0
    a = weights(Path(big.training.output_dir) / "checkpoint-1")
    b = weights(Path(small.training.output_dir) / "checkpoint-1")
    init = weights(Path(big.model.name_or_path))
    assert any(not torch.equal(a[k], init[k]) for k in a)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)


def test_gradient_checkpointing_gives_the_same_update(make_config, host):
    common = {"max_steps": 1, "optim": "sgd", "learning_rate": 0.5}
    plain = make_config("grpo", output="plain", **common)
    ckpt = make_config("grpo", output="ckpt", gradient_checkpointing=True, **common)
    m_plain, m_ckpt = run(plain, host), run(ckpt, host)
    assert m_plain["loss"] == pytest.approx(m_ckpt["loss"], rel=1e-5, abs=1e-7)
    a = weights(Path(plain.training.output_dir) / "checkpoint-1")
    b = weights(Path(ckpt.training.output_dir) / "checkpoint-1")
    assert any(not torch.equal(a[k], weights(Path(plain.model.name_or_path))[k]) for k in a)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6)
    saved = json.loads((Path(ckpt.training.output_dir) / "checkpoint-1/config.json").read_text())
    assert saved.get("use_cache", True) is True  # loads for fast inference


# --------------------------------------------------------------------------- units


class _Saveable:
    """Stands in for a model/tokenizer: ``save_pretrained`` writes one small file."""

    def save_pretrained(self, path):
        (Path(path) / "weights.bin").write_bytes(b"x" * 10)


def _save(out: Path, step: int, limit: int | None = None) -> Path:
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return save_checkpoint(
        out,
        step,
        model=_Saveable(),
        tokenizer=_Saveable(),
        tensors={"optimizer": opt.state_dict()},
        state={"data": {"position": step}},
        save_total_limit=limit,
    )


def test_checkpoints_are_atomic_and_rotated(tmp_path):
    out = tmp_path / "run"
    for step in (1, 2, 3):
        _save(out, step, limit=2)
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-2", "checkpoint-3"]
    # A half-written checkpoint (no marker) and leftovers are never picked.
    (out / "checkpoint-9").mkdir()
    (out / ".checkpoint-10.tmp").mkdir()
    (out / ".checkpoint-10.tmp" / MARK).touch()  # rlvr's: what a killed save leaves
    assert latest_checkpoint(out) == out / "checkpoint-3"
    state = read_state(out / "checkpoint-3")
    assert state["step"] == 3 and state["data"]["position"] == 3
    saved = load_file(out / "checkpoint-3" / "rng_state.pt")
    set_rng_state(saved)
    assert torch.equal(rng_state()["torch"], saved["torch"])
    assert load_file(out / "checkpoint-3" / "optimizer.pt")["param_groups"][0]["lr"] == 0.1
    _save(out, 3)  # the same step again replaces it atomically
    _save(out, 4)
    assert not (out / ".checkpoint-10.tmp").exists()  # leftovers are cleaned by a save
    assert latest_checkpoint(out) == out / "checkpoint-4"


def test_sampler_is_seeded_epoch_aware_and_resumable():
    a = PromptSampler(5, seed=3)
    first = a.take(7)
    assert sorted(first[:5]) == [0, 1, 2, 3, 4]  # one full epoch, then the next one
    assert a.epoch == 1
    b = PromptSampler(5, seed=3)
    b.load_state_dict(a.state_dict())
    assert a.take(6) == b.take(6)
    assert PromptSampler(5, seed=3).take(7) == first
    assert PromptSampler(5, seed=4).take(5) != first[:5]
    assert PromptSampler(5, seed=3, shuffle=False).take(6) == [0, 1, 2, 3, 4, 0]


def test_prompts_use_the_chat_template_and_left_truncate(tiny_model):
    from rlvr.config.schema import DataConfig, ModelConfig
    from rlvr.model.loading import load_tokenizer

    tok = load_tokenizer(ModelConfig(name_or_path=str(tiny_model)))
    rows = [{"prompt": "What is 2 + 2?", "answer": "4"}]
    chat = PromptSet(rows, DataConfig(path="x", system_prompt="Be brief."), tok, None)[0]
    assert chat.text.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert chat.text.endswith("<|im_start|>assistant\n")
    plain = PromptSet(rows, DataConfig(path="x", chat_template=False), tok, None)[0]
    assert plain.text == "What is 2 + 2?"
    cut = PromptSet(rows, DataConfig(path="x"), tok, 5)[0]
    assert len(cut.ids) == 5 and cut.truncated and cut.ids == chat_ids(tok, rows)[-5:]


def test_few_shot_examples_are_turns_after_the_system_message(tiny_model):
    from rlvr.config.schema import DataConfig, ModelConfig
    from rlvr.data.prompts import prompt_messages
    from rlvr.model.loading import load_tokenizer

    tok = load_tokenizer(ModelConfig(name_or_path=str(tiny_model)))
    shot = {"user": "What is 125 + 48?", "assistant": "<answer>173</answer>"}
    data = DataConfig(path="x", system_prompt="Be brief.", few_shot=[shot], chat_template=True)
    rows = [
        {"prompt": "What is 2 + 2?"},
        {"prompt": [{"role": "system", "content": "Own."}, {"role": "user", "content": "3?"}]},
    ]
    roles = [(m["role"], m["content"]) for m in prompt_messages(rows[0], data)]
    assert roles == [
        ("system", "Be brief."),
        ("user", "What is 125 + 48?"),
        ("assistant", "<answer>173</answer>"),
        ("user", "What is 2 + 2?"),
    ]
    # a row with its own system message keeps it first, and the examples follow it
    assert [m["content"] for m in prompt_messages(rows[1], data)] == [
        "Own.",
        "What is 125 + 48?",
        "<answer>173</answer>",
        "3?",
    ]
    chat = PromptSet(rows[:1], data, tok, None)[0].text
    assert chat == tok.apply_chat_template(
        prompt_messages(rows[0], data), tokenize=False, add_generation_prompt=True
    )
    assert chat.index("<answer>173</answer>") < chat.index("What is 2 + 2?")
    plain = data.model_copy(update={"chat_template": False})
    assert PromptSet(rows[:1], plain, tok, None)[0].text == (
        "Be brief.\n\nWhat is 125 + 48?\n<answer>173</answer>\n\nWhat is 2 + 2?"
    )


def chat_ids(tok, rows):
    text = tok.apply_chat_template(
        [{"role": "user", "content": rows[0]["prompt"]}], tokenize=False, add_generation_prompt=True
    )
    return tok(text, add_special_tokens=False)["input_ids"]


def test_check_fields_lists_every_problem(host):
    from rlvr.config.schema import validate

    config = validate({"rewards": [{"name": "toy"}, {"name": "numbers", "label": "num"}]}, host)
    rows = [{"prompt": "a", "answer": "1"}, {"prompt": "b"}, {"answer": "2"}]
    problems = check_fields(rows, config.rewards, host, prompt_field="prompt")
    assert problems == [
        "field 'prompt' needed by the prompt (data.prompt_field) is missing in 1 of 3 rows",
        "field 'answer' needed by reward 'toy' (rewards[0]) is missing in 1 of 3 rows",
        "field 'answer' needed by reward 'num' (rewards[1]) is missing in 1 of 3 rows",
    ]


def test_max_minutes_saves_and_stops_before_a_step_that_would_not_fit(
    make_config, host, monkeypatch, capsys
):
    """Each step "takes" 10 minutes (a fake clock): with a 25-minute budget, step 2 ends at
    20 minutes and a third would end at 30, so the run saves checkpoint-2 and stops; --resume
    (a new process, a new budget) goes on to max_steps."""
    import rlvr.training.stopping as stopping
    from rlvr.outputs.metrics_logger import MetricsLogger

    now = {"t": 0.0}
    monkeypatch.setattr(stopping, "_clock", lambda: now["t"])
    original = MetricsLogger.log

    def log(self, metrics):  # called once per step, inside the step
        now["t"] += 600.0
        original(self, metrics)

    monkeypatch.setattr(MetricsLogger, "log", log)
    config = make_config(output="timed", max_steps=4, max_minutes=25)
    run(config, host)
    out = Path(config.training.output_dir)
    assert [x["step"] for x in read_metrics(out)] == [1, 2]
    assert latest_checkpoint(out).name == "checkpoint-2"
    err = capsys.readouterr()
    why = "(training.max_minutes=25: 20.0 min used, a step takes up to 10.0 min)"
    assert f"stopped at step 2 {why}" in err.out + err.err
    # The summary says the run stopped, and why, not that it finished.
    assert f"run stopped early ({why[1:-1]}; --resume continues it): 2 steps" in err.out
    assert "run finished" not in err.out

    now["t"] = 0.0
    run(config, host, resume=True)
    assert "run finished: 4 steps" in capsys.readouterr().out
    assert [x["step"] for x in read_metrics(out)] == [1, 2, 3, 4]
    assert latest_checkpoint(out).name == "checkpoint-4"
