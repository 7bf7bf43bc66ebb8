"""``training.max_staleness``: rollouts produced ahead by a thread, from weights at most k
updates old (:mod:`rlvr.rollout.pipeline`), and the masked importance weights they use.

Runs on test_trainer's tiny model and 16-row arithmetic dataset.
"""

from __future__ import annotations

import json
import math
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
# test_trainer's fixtures: the tiny model, its dataset, a host, a config builder.
from test_trainer import comparable, run  # noqa: E402
from test_trainer import dataset as dataset  # noqa: E402
from test_trainer import host as host  # noqa: E402
from test_trainer import make_config as make_config  # noqa: E402
from test_trainer import tiny_model as tiny_model  # noqa: E402

from rlvr.config.schema import ConfigError  # noqa: E402
from rlvr.functional import masked_importance_weights  # noqa: E402
from rlvr.outputs.checkpoint import list_checkpoints, read_state  # noqa: E402
from rlvr.outputs.metrics import read_metrics  # noqa: E402
from rlvr.rewards.failures import RewardError  # noqa: E402

CORRECTED = {"importance_sampling_correction": True}
TESTS = Path(__file__).parent
BOOM = f"{TESTS / 'trl_rewards.py'}:boom_on_four"


def samples(output: Path) -> list[dict]:
    return [json.loads(line) for line in (output / "samples.jsonl").read_text().splitlines()]


def rollout_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "rlvr-rollouts"]


# --------------------------------------------------------------------------- the math


def test_masked_weights_drop_tokens_over_the_cap():
    # ratios 1, 1.5, 3 (over the cap of 2: masked, not clipped), 0.25; the last token is padding
    logp_sampler = torch.tensor([[-1.0, -2.0, -3.0, -0.5, 0.0]])
    gap = torch.tensor([[0.0, math.log(1.5), math.log(3.0), math.log(0.25), 9.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    w = masked_importance_weights(logp_sampler + gap, logp_sampler, mask, cap=2.0)
    torch.testing.assert_close(w, torch.tensor([[1.0, 1.5, 0.0, 0.25, 0.0]]))
    assert not w.requires_grad


# --------------------------------------------------------------------------- config


def test_stale_samples_need_the_correction(make_config):
    with pytest.raises(ConfigError) as info:
        make_config(max_staleness=1)
    (path, message), *_ = info.value.problems
    assert path == "training.max_staleness"
    assert "importance_sampling_correction: true" in message


def test_hf_gives_log_probs_to_asynchronous_runs_only(make_config):
    make_config(algo_params=CORRECTED, max_staleness=1)  # hf computes them on request
    with pytest.raises(ConfigError) as info:  # a synchronous hf run: nothing to correct
        make_config(algo_params=CORRECTED)
    assert info.value.problems[0][0] == "backend.name"


# --------------------------------------------------------------------------- training


def test_zero_staleness_is_the_synchronous_loop(make_config, host):
    plain = run(make_config(output="plain"), host)
    zero = run(make_config(output="zero", max_staleness=0), host)
    assert comparable([plain]) == comparable([zero])
    assert "staleness" not in zero


@pytest.mark.parametrize("k", [1, 2])
def test_samples_are_at_most_k_updates_old(make_config, host, k):
    config = make_config(algo_params=CORRECTED, max_staleness=k, max_steps=5, log_samples_steps=1)
    run(config, host)
    out = Path(config.training.output_dir)
    lines = read_metrics(out)
    assert [m["step"] for m in lines] == [1, 2, 3, 4, 5]
    staleness = [m["staleness"] for m in lines]
    # Step s samples from the weights of step max(0, s - 1 - k): the first steps from the
    # initial weights, every later one exactly k updates behind (the producer runs ahead).
    assert staleness == [min(s - 1, k) for s in range(1, 6)]
    for m in lines:
        assert m["wait/trainer"] >= 0 and m["wait/generator"] >= 0
        assert math.isfinite(m["loss"]) and "algo/grpo/importance_weight/ratio_max" in m
    for record in samples(out):
        assert record["step"] - 1 - record["policy_version"] == min(record["step"] - 1, k)
    assert not rollout_threads()


def test_an_asynchronous_run_reproduces(make_config, host):
    """Which weights sample a step is fixed (step s: those of step s - 1 - k), not timing."""
    a = make_config(output="a", algo_params=CORRECTED, max_staleness=1, max_steps=4)
    b = make_config(output="b", algo_params=CORRECTED, max_staleness=1, max_steps=4)
    run(a, host)
    run(b, host)
    runs = [read_metrics(Path(c.training.output_dir)) for c in (a, b)]
    assert comparable(runs[0]) == comparable(runs[1])


def test_stale_weights_differ_from_the_trained_ones(make_config, host):
    """The correction sees a gap: the sampler's log-probs are those of older weights."""
    config = make_config(algo_params=CORRECTED, max_staleness=1, max_steps=4, learning_rate=0.02)
    run(config, host)
    lines = read_metrics(Path(config.training.output_dir))
    assert lines[0]["algo/grpo/importance_weight/ratio_max"] == pytest.approx(1.0, abs=1e-3)
    assert max(m["algo/grpo/importance_weight/ratio_max"] for m in lines[2:]) > 1.01


def test_a_reward_failing_in_the_producer_stops_the_run(make_config, host, capsys):
    # As test_reward_errors' run: step 2 holds row 2 (answer 4), on which the reward raises;
    # here the producer scores step 2 while step 1 trains, and the trainer stops at step 2.
    four = {"name": "callable", "label": "four", "params": {"function": BOOM, "batch": "group"}}
    config = make_config(
        algo_params=CORRECTED,
        max_staleness=1,
        rewards=[{"name": "toy"}, four],
        data={"shuffle": False},
        max_reward_error_frac=0.25,
    )
    with pytest.raises(RewardError, match=r"failed on 4 of 8 calls"):
        run(config, host)
    out = Path(config.training.output_dir)
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-1"]
    # The checkpoint keeps the prompts the trainer took (step 1's), not the producer's.
    assert read_state(out / "checkpoint-1")["data"]["position"] == 2
    assert not rollout_threads()


def test_resume_takes_up_the_prompts_where_the_trainer_was(make_config, host):
    sync = make_config(output="sync", max_steps=4, log_samples_steps=1)
    run(sync, host)
    first = make_config(
        algo_params=CORRECTED, max_staleness=1, max_steps=2, save_steps=2, log_samples_steps=1
    )
    run(first, host)
    out = Path(first.training.output_dir)
    resumed = make_config(
        algo_params=CORRECTED, max_staleness=1, max_steps=4, save_steps=2, log_samples_steps=1
    )
    run(resumed, host, resume=True)

    def prompts(path: Path) -> dict[int, list[str]]:
        by_step: dict[int, list[str]] = {}
        for r in samples(path):
            by_step.setdefault(r["step"], []).append(r["prompt"])
        return by_step

    assert prompts(out) == prompts(Path(sync.training.output_dir))
    assert [m["staleness"] for m in read_metrics(out)] == [0, 1, 0, 1]  # 3: fresh after resume


def test_asynchronous_runs_under_fsdp_are_refused(make_config):
    with pytest.raises(ConfigError) as info:
        make_config(algo_params=CORRECTED, max_staleness=1, parallelism="fsdp")
    assert any(
        path == "training.max_staleness" and "parallelism: fsdp is not supported" in message
        for path, message in info.value.problems
    )


def test_lora_policy_samples_from_its_own_copy(make_config, host):
    """hf generates with a copy of the (peft) policy, which takes each update's weights."""
    pytest.importorskip("peft", reason="LoRA needs the peft extra: pip install 'rlvr[lora]'")
    config = make_config(
        algo_params=CORRECTED,
        max_staleness=1,
        max_steps=4,
        learning_rate=0.05,
        model={"lora": {}},
    )
    run(config, host)
    lines = read_metrics(Path(config.training.output_dir))
    assert [m["staleness"] for m in lines] == [0, 1, 1, 1]
    # The copy follows the policy one update behind: the gap shows, and stays bounded.
    assert max(m["algo/grpo/importance_weight/ratio_max"] for m in lines[2:]) > 1.0001
    assert all(math.isfinite(m["loss"]) for m in lines)


def test_in_training_eval_holds_the_producer(make_config, host):
    """An eval uses the generator and the rewards the producer uses: it runs alone, on the
    weights of the step it follows, and the run goes on."""
    config = make_config(
        algo_params=CORRECTED, max_staleness=1, max_steps=4, eval_steps=2, eval_limit=4
    )
    run(config, host)
    lines = read_metrics(Path(config.training.output_dir))
    assert [m["step"] for m in lines if "eval/pass@1" in m] == [0, 2, 4]
    assert [m["staleness"] for m in lines if "staleness" in m] == [0, 1, 1, 1]
    assert not rollout_threads()


# --------------------------------------------------------------------------- in-flight updates


class Sampler:
    def state_dict(self) -> dict[str, int]:
        return {}

    def load_state_dict(self, state: dict[str, int]) -> None:
        pass


def pipeline_with_a_slow_second_step(takes_weights_in_flight: bool):
    """k=1: steps 1 and 2 sample from the first weights; step 2's rollout runs until the
    generator has taken the update of step 1 (or a second has passed)."""
    from rlvr.rollout.pipeline import RolloutPipeline

    synced = threading.Event()
    generator = SimpleNamespace(
        takes_weights_in_flight=takes_weights_in_flight, sync_weights=lambda _: synced.set()
    )

    def produce(step: int):
        if step == 2:
            synced.wait(timeout=1.0)
        return SimpleNamespace(generated=[], step=step, update_seen=synced.is_set())

    pipe = RolloutPipeline(
        produce,
        generator,
        max_staleness=1,
        first_step=1,
        last_step=2,
        producer_sampler=Sampler(),
        consumed=Sampler(),
    )
    return pipe


def test_an_update_waits_for_the_rollout_in_flight_by_default():
    pipe = pipeline_with_a_slow_second_step(takes_weights_in_flight=False)
    try:
        pipe.take(1)
        waited, _ = pipe.sync_weights(None)  # waits for step 2, which ends on the old weights
        second, _ = pipe.take(2)
        assert not second.update_seen and waited >= 0.9
    finally:
        pipe.close()


def test_a_generator_that_pauses_takes_the_update_while_a_rollout_is_in_flight():
    """vLLM servers with in_flight_updates: pause: step 2's rollout is still running when the
    update reaches the generator, which pauses it; it then ends on the new weights."""
    pipe = pipeline_with_a_slow_second_step(takes_weights_in_flight=True)
    try:
        pipe.take(1)
        waited, _ = pipe.sync_weights(None)
        second, metrics = pipe.take(2)
        assert second.update_seen and waited < 0.9
        assert metrics["staleness"] == 1.0  # the version it started from
    finally:
        pipe.close()
