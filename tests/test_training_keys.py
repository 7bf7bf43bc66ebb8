"""Every accepted ``training`` key does something: the test walks the schema and, for each key,
changes its value and shows an observable difference in what the trainer builds or does, or
finds the key on the explicit TRL-compat list of keys that are ignored with a warning."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import test_trainer  # noqa: E402

from rlvr.api.errors import RlvrError  # noqa: E402
from rlvr.compat.trl.keys import TRL_IGNORED  # noqa: E402
from rlvr.config.schema import TrainingConfig  # noqa: E402
from rlvr.outputs.checkpoint import list_checkpoints  # noqa: E402
from rlvr.training.launch import train  # noqa: E402
from rlvr.training.trainer import Trainer  # noqa: E402

tiny_model, dataset = test_trainer.tiny_model, test_trainer.dataset
host, make_config = test_trainer.host, test_trainer.make_config
BOOM = f"{Path(__file__).parent / 'trl_rewards.py'}:boom_on_four"


# --------------------------------------------------------------------------- observables


def _setup(config, host) -> Trainer:
    trainer = Trainer(config, host, progress=False)
    trainer.setup()
    return trainer


def built(read: Callable[[Trainer], Any]) -> Callable[[Any, Any], Any]:
    """What the trainer built in setup (optimizer, scheduler, prompts, pool...)."""

    def observe(config, host):
        trainer = _setup(config, host)
        try:
            return read(trainer)
        finally:
            trainer.close()

    return observe


def sampled(config, host) -> list[list[int]]:
    """The token ids of the first step's completions."""
    trainer = _setup(config, host)
    try:
        rollout = trainer.rollout_runner.run(1, trainer.prompts_per_step)
        return [c.token_ids for c in rollout.generated]
    finally:
        trainer.close()


def lr_schedule(trainer: Trainer) -> list[float]:
    lrs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # stepping the scheduler alone, on purpose
        for _ in range(3):
            lrs.append(round(trainer.update.optimizer.param_groups[0]["lr"], 12))
            trainer.update.scheduler.step()
    return lrs


def ran(read: Callable[[Path], Any]) -> Callable[[Any, Any], Any]:
    """What a whole (3-step) run left in its output directory, or the error that stopped it."""

    def observe(config, host):
        try:
            train(config, host, progress=False)
        except RlvrError as exc:  # TrainingError, RewardError
            return f"stopped: {exc}"[:60]
        return read(Path(config.training.output_dir))

    return observe


def first_weights(out: Path) -> list[float]:
    from safetensors.torch import load_file

    tensors = load_file(str(list_checkpoints(out)[-1] / "model.safetensors"))
    return sorted(tensors.items())[0][1].flatten()[:8].tolist()


def checkpoints(out: Path) -> list[str]:
    return [p.name for p in list_checkpoints(out)]


def sample_steps(out: Path) -> list[int]:
    lines = (out / "samples.jsonl").read_text().splitlines()
    return sorted({json.loads(line)["step"] for line in lines})


def eval_steps(out: Path) -> list[int]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [m["step"] for m in map(json.loads, lines) if "eval/pass@1" in m]


def eval_prompts(trainer: Trainer) -> int:
    return len(trainer.evaluation.prompts)


def eval_calls(trainer: Trainer) -> list[int]:
    """Completions per generation call of one in-training eval."""
    sizes: list[int] = []
    generate = trainer.generator.generate

    def recording(prompts, n, sampling):
        sizes.append(len(prompts) * n)
        return generate(prompts, n, sampling)

    trainer.generator.generate = recording
    trainer.evaluate()
    return sizes


def profiled_phases(out: Path) -> list[str]:
    """The ``profile/<phase>`` keys of each line of ``metrics.jsonl``, those with CPU time."""
    lines = (out / "metrics.jsonl").read_text().splitlines()
    keys = [
        sorted(k for k, v in json.loads(line).items() if k.startswith("profile/") and v > 0)
        for line in lines
    ]
    return keys


def nothing(out: Path) -> None:
    return None  # the test counts the console lines itself


# key -> (base training overrides, changed overrides, observable)
PROBES: dict[str, tuple[dict, dict, Callable]] = {
    "output_dir": ({}, {"output_dir": "elsewhere"}, built(lambda t: t.output_dir.name)),
    "seed": ({}, {"seed": 1}, sampled),
    "learning_rate": (
        {},
        {"learning_rate": 0.1},
        built(lambda t: t.update.optimizer.defaults["lr"]),
    ),
    "adam_beta1": ({}, {"adam_beta1": 0.5}, built(lambda t: t.update.optimizer.defaults["betas"])),
    "adam_beta2": ({}, {"adam_beta2": 0.5}, built(lambda t: t.update.optimizer.defaults["betas"])),
    "adam_epsilon": (
        {},
        {"adam_epsilon": 0.1},
        built(lambda t: t.update.optimizer.defaults["eps"]),
    ),
    "weight_decay": (
        {},
        {"weight_decay": 0.1},
        built(lambda t: t.update.optimizer.param_groups[0]["weight_decay"]),
    ),
    "optim": ({}, {"optim": "sgd"}, built(lambda t: type(t.update.optimizer).__name__)),
    "lr_scheduler_type": ({}, {"lr_scheduler_type": "constant"}, built(lr_schedule)),
    "warmup_ratio": ({}, {"warmup_ratio": 0.5}, built(lr_schedule)),
    "warmup_steps": ({}, {"warmup_steps": 2}, built(lr_schedule)),
    "max_grad_norm": ({}, {"max_grad_norm": 1e-9}, ran(first_weights)),
    "per_device_train_batch_size": (
        {},
        {"per_device_train_batch_size": 3},
        built(lambda t: t.prompts_per_step),
    ),
    "gradient_accumulation_steps": (
        {},
        {"gradient_accumulation_steps": 2},
        built(lambda t: t.prompts_per_step),
    ),
    "num_generations": ({}, {"num_generations": 2}, sampled),
    "guidance": (
        {},
        {"guidance": {"field": "answer"}},
        built(lambda t: [c.guide for c in t.rollout_runner.run(1, t.prompts_per_step).kept]),
    ),
    "max_prompt_length": (
        {},
        {"max_prompt_length": 3},
        built(lambda t: len(t.rollout_runner.prompts[0].ids)),
    ),
    "max_completion_length": ({}, {"max_completion_length": 2}, sampled),
    "max_steps": ({}, {"max_steps": 5}, built(lambda t: t.max_steps)),
    "num_train_epochs": (
        {"max_steps": -1},
        {"max_steps": -1, "num_train_epochs": 0.25},
        built(lambda t: t.max_steps),
    ),
    "temperature": ({}, {"temperature": 0.3}, sampled),
    "top_p": ({}, {"top_p": 0.3}, sampled),
    "top_k": ({}, {"top_k": 2}, sampled),
    "min_p": ({}, {"min_p": 0.5}, sampled),
    "repetition_penalty": ({}, {"repetition_penalty": 5.0}, sampled),
    "logging_steps": ({}, {"logging_steps": 2}, ran(nothing)),
    "save_steps": ({}, {"save_steps": 1}, ran(checkpoints)),
    "save_total_limit": (
        {"save_steps": 1},
        {"save_steps": 1, "save_total_limit": 1},
        ran(checkpoints),
    ),
    "report_to": (
        {},
        {"report_to": "tensorboard"},
        built(lambda t: (t.output_dir / "tensorboard").is_dir()),
    ),
    "gradient_checkpointing": (
        {},
        {"gradient_checkpointing": True},
        built(lambda t: t.policy.is_gradient_checkpointing),
    ),
    "pack_prompts": ({}, {"pack_prompts": False}, built(lambda t: t.update.packs)),
    "profile_phases": ({}, {"profile_phases": True}, ran(profiled_phases)),
    "log_samples_steps": ({}, {"log_samples_steps": 1}, ran(sample_steps)),
    "reward_workers": ({}, {"reward_workers": 1}, built(lambda t: len(t.scorer.pool._workers))),
    "max_bad_steps": ({"max_bad_steps": 1}, {"max_bad_steps": 2}, ran(checkpoints)),
    "max_reward_error_frac": ({}, {"max_reward_error_frac": 0.25}, ran(checkpoints)),
    "max_minutes": ({}, {"max_minutes": 1e-9}, ran(checkpoints)),  # stops after step 1
    # step 2's episodes all fail (an environment whose reset raises on its rows): the default
    # stops there with an error, 1 trains through it
    "max_failed_episode_frac": ({}, {"max_failed_episode_frac": 1}, ran(checkpoints)),
    "eval_steps": ({}, {"eval_steps": 2}, ran(eval_steps)),
    # (with the algorithm's importance_sampling_correction, which it needs)
    "max_staleness": ({}, {"max_staleness": 1}, built(lambda t: t.stepper.pipeline is not None)),
    "eval_on_start": (
        {"eval_steps": 2},
        {"eval_steps": 2, "eval_on_start": False},
        built(lambda t: t.eval_schedule.should_evaluate(0)),
    ),
    "eval_limit": ({"eval_steps": 2}, {"eval_steps": 2, "eval_limit": 3}, built(eval_prompts)),
    "eval_sampling": (
        {"eval_steps": 2},
        {"eval_steps": 2, "eval_sampling": "train"},
        built(lambda t: t.evaluation.sampling(0, 0).temperature),
    ),
    "eval_num_generations": (
        {"eval_steps": 2, "eval_sampling": "train"},
        {"eval_steps": 2, "eval_sampling": "train", "eval_num_generations": 2},
        built(lambda t: t.evaluation.k),
    ),
    "keep_best": (
        {"eval_steps": 2},
        {"eval_steps": 2, "keep_best": True},
        ran(lambda out: (out / "best_checkpoint.json").is_file()),
    ),
    "collapse": ({}, {"collapse": {"action": "off"}}, built(lambda t: t.guard.enabled)),
    "eval_batch_size": (
        {"eval_steps": 2, "eval_limit": 5},
        {"eval_steps": 2, "eval_limit": 5, "eval_batch_size": 2},
        built(eval_calls),
    ),
}

#: keys that act only with several ranks, so one process cannot probe them here.
SEVERAL_RANKS = {
    "parallelism": "tests/test_distributed.py: fsdp runs equal one process, fsdp resume",
    "fsdp_cpu_offload": "untested here (CUDA); listed as such in docs/how-to/several-gpus.md",
}

#: probes that need whole runs (slow); the rest only build the trainer.
RUNS = {k for k, (_, _, observe) in PROBES.items() if observe.__qualname__.startswith("ran")}


def test_the_schema_walk_covers_every_training_key():
    """A key added to TrainingConfig without a probe here (or a TRL-compat entry) fails."""
    fields = set(TrainingConfig.model_fields)
    covered = set(PROBES) | set(SEVERAL_RANKS)
    assert fields == covered, (fields - covered, covered - fields)
    assert not fields & set(TRL_IGNORED)  # an ignored key is not also a real one


@pytest.mark.parametrize("key", sorted(TRL_IGNORED))
def test_trl_compat_keys_are_ignored_with_a_warning(key, host):
    from rlvr.config.schema import load_config

    # 12345: a value none of them ignores silently (each key's TRL default is accepted quietly)
    with pytest.warns(UserWarning, match=rf"^training\.{key} is ignored: "):
        config = load_config({"training": {key: 12345}}, host)
    assert key not in config.training.model_dump()


def _params(keys):
    return [pytest.param(k, marks=pytest.mark.slow) if k in RUNS else k for k in sorted(keys)]


@pytest.mark.parametrize("key", _params(PROBES))
def test_each_training_key_changes_something(key, make_config, host, tmp_path, monkeypatch, capsys):
    base, changed, observe = PROBES[key]
    if key == "max_bad_steps":  # every loss non-finite: the run stops after max_bad_steps
        from rlvr.algorithms.base import PolicyGradient
        from rlvr.api.runtime import LossOutput

        loss = PolicyGradient.loss

        def nan_loss(self, *args, **kwargs):
            out = loss(self, *args, **kwargs)
            return LossOutput(loss=out.loss * float("nan"), metrics=out.metrics)

        monkeypatch.setattr(PolicyGradient, "loss", nan_loss)
    rewards = None
    if key == "max_reward_error_frac":  # step 2 has a row on which a reward raises
        rewards = [
            {"name": "toy"},
            # batch: group: the raise fails its prompt's 4 completions of 8 (the whole step's
            # 8 with one call on the step, past the default share too)
            {"name": "callable", "label": "four", "params": {"function": BOOM, "batch": "group"}},
        ]
    environment, data = None, {"shuffle": False}
    if key == "max_failed_episode_frac":  # a TRL class whose reset raises on step 2's rows
        path = tmp_path / "broken_env.py"
        path.write_text(
            "class BrokenEnv:\n"
            "    def reset(self, id: int = 0, **row):\n"
            "        if id in (2, 3):\n"
            "            raise ConnectionError('task server offline')\n"
        )
        factory = f"{path}:BrokenEnv"
        environment = {"name": "trl_env", "max_turns": 1, "params": {"factory": factory}}
        data["chat_template"] = True
    values = []
    for i, overrides in enumerate((base, changed)):
        training = {"output_dir": str(tmp_path / f"run{i}"), **overrides}
        if "output_dir" in overrides:
            training["output_dir"] = str(tmp_path / overrides["output_dir"])
        corrected = {"importance_sampling_correction": True}
        config = make_config(
            rewards=rewards,
            data=data,
            output=f"run{i}",
            environment=environment,
            algo_params=corrected if overrides.get("max_staleness") else None,
            **training,
        )
        capsys.readouterr()
        value = observe(config, host)
        if key == "logging_steps":
            value = capsys.readouterr().err.count("step ")
        values.append(value)
    assert values[0] != values[1], f"training.{key}: {values[0]!r} both times"
