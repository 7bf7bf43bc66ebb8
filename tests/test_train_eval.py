"""In-training evaluation (``training.eval_steps``): when it runs, that it reports what
``rlvr eval`` reports for the same weights, that it does not change training, resume, the
format-compliance rule shared with ``rlvr eval``, and the ``eval.png`` plot."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

import test_trainer  # noqa: E402

from rlvr.config.schema import ConfigError, load_config  # noqa: E402
from rlvr.evaluation.correctness import format_checks, is_format_ok  # noqa: E402
from rlvr.evaluation.evaluate import evaluate  # noqa: E402
from rlvr.outputs.metrics import read_metrics  # noqa: E402
from rlvr.outputs.plot import plot_run  # noqa: E402

tiny_model, dataset = test_trainer.tiny_model, test_trainer.dataset
host, make_config = test_trainer.host, test_trainer.make_config
run, comparable, weights = test_trainer.run, test_trainer.comparable, test_trainer.weights

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def eval_file(tmp_path) -> Path:
    """Six held-out prompts (the rewards need ``answer``)."""
    path = tmp_path / "eval.jsonl"
    rows = [{"prompt": f"What is {a} + 7?", "answer": str(a + 7), "id": a} for a in range(6)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def eval_lines(out: Path) -> list[dict]:
    return [m for m in read_metrics(out) if "eval/pass@1" in m]


def training_only(lines: list[dict]) -> list[dict]:
    """The training metrics of each step (eval keys and the step-0 eval line left out)."""
    rows = [{k: v for k, v in m.items() if not k.startswith("eval/")} for m in lines]
    return comparable([m for m in rows if "reward" in m])


# --------------------------------------------------------------------------- format compliance


def test_format_compliance_is_a_full_match_of_every_format_reward(host):
    config = load_config(
        {
            "rewards": [
                {"name": "numbers"},
                {"name": "format", "params": {"tag_score": 0.25, "tag_penalty": -0.5}},
                {
                    "name": "format",
                    "label": "bare",
                    "params": {"reasoning_start": None, "reasoning_end": None},
                },
            ]
        },
        host,
    )
    # a full match earns match_score and tag_score for each of the 4 tags
    assert format_checks(config) == [("format", 2.0), ("bare", 1.0)]
    checks = format_checks(config)
    assert is_format_ok({"numbers": 0.0, "format": 2.0, "bare": 1.0}, checks)
    assert not is_format_ok({"format": 1.0, "bare": 1.0}, checks)  # all tags, no full match
    assert not is_format_ok({"format": 2.0, "bare": None}, checks)
    no_format = load_config({"rewards": [{"name": "numbers"}]}, host)
    assert format_checks(no_format) == []


def test_the_format_reward_scores_its_declared_correct_exactly_on_a_full_match(host):
    from rlvr.api.registration import Sample
    from rlvr.plugins.rewards.format import FormatParams, FormatReward

    params = FormatParams(tag_score=0.25, tag_penalty=-0.5, prefilled_reasoning=True)
    reward = FormatReward(params)
    full = "<think>x</think>\n<answer>3</answer>"
    for text, ok in [
        (full, True),
        ("x</think><answer>3</answer>", True),
        ("<answer>3</answer>", False),
        (full + " junk", False),
    ]:
        score = reward(Sample(completion=text, prompt="", row={}, num_tokens=1))
        assert (score >= params.correct) is ok, (text, score, params.correct)


def test_greedy_eval_with_several_generations_is_refused(host):
    with pytest.raises(ConfigError, match="eval_sampling: train"):
        load_config({"training": {"eval_steps": 2, "eval_num_generations": 4}}, host)


# --------------------------------------------------------------------------- in training


def test_eval_runs_at_start_every_n_steps_and_at_the_end_as_rlvr_eval_does(
    make_config, host, eval_file, tmp_path
):
    """Steps 0, 2 and 3 of a 3-step run with eval_steps 2; step 0 and step 3 report exactly
    what ``rlvr eval`` reports for the initial model and for checkpoint-3."""
    config = make_config(
        data={"eval_path": str(eval_file)}, eval_steps=2, eval_limit=5, save_steps=3
    )
    run(config, host)
    out = Path(config.training.output_dir)
    lines = read_metrics(out)
    assert [m["step"] for m in lines] == [0, 1, 2, 3]
    assert set(lines[0]) == {"step"} | {k for k in lines[0] if k.startswith("eval/")}
    assert [m["step"] for m in eval_lines(out)] == [0, 2, 3]
    assert not any(k.startswith("eval/") for k in lines[1])
    for m in eval_lines(out):
        for key in (
            "eval/reward_mean",
            "eval/pass@1",
            "eval/format_ok",
            "eval/time",
            "eval/rewards/format/mean",
            "eval/rewards/numbers/mean",
            "eval/completion_length/mean",
        ):
            assert key in m, key
    greedy = config.model_copy(
        update={"training": config.training.model_copy(update={"temperature": 0.0})}
    )
    for step, checkpoint in ((0, None), (3, out / "checkpoint-3")):
        summary = evaluate(
            greedy,
            host,
            checkpoint=checkpoint,
            limit=5,
            output=tmp_path / f"ev{step}",
            progress=False,
        )
        logged = next(m for m in lines if m["step"] == step)
        assert summary["num_samples"] == 5
        assert logged["eval/pass@1"] == summary["pass@1"]
        assert logged["eval/format_ok"] == summary["format_ok"]
        assert logged["eval/reward_mean"] == pytest.approx(summary["reward"])
        assert logged["eval/completion_length/mean"] == summary["completion_length/mean"]
    # rlvr plot draws the eval curves
    paths = plot_run(out)
    eval_png = out / "plots" / "eval.png"
    assert eval_png in paths and eval_png.read_bytes().startswith(PNG)


def test_a_run_with_eval_trains_exactly_as_one_without(make_config, host, eval_file):
    """Sampled evaluation after every step (its own seeds) leaves the training untouched."""
    plain = make_config(output="plain")
    run(plain, host)
    with_eval = make_config(
        output="with_eval",
        data={"eval_path": str(eval_file)},
        eval_steps=1,
        eval_sampling="train",
        eval_num_generations=2,
    )
    run(with_eval, host)
    a, b = (Path(c.training.output_dir) for c in (plain, with_eval))
    assert [m["step"] for m in eval_lines(b)] == [0, 1, 2, 3]
    assert "eval/pass@2" in eval_lines(b)[0]
    assert training_only(read_metrics(b)) == training_only(read_metrics(a))
    wa, wb = weights(a / "checkpoint-3"), weights(b / "checkpoint-3")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert "eval.png" not in [p.name for p in plot_run(a)]  # no eval, no eval curves


def test_the_generators_own_metrics_leave_out_the_evals_requests(
    make_config, host, eval_file, monkeypatch
):
    """A generator's ``take_metrics`` (vLLM's prefix-cache share, a server's queue time)
    describes a step's rollout: the requests of the eval before it are not counted in it. The
    stand-in reports how many prompts it was given since it was last asked."""
    from rlvr.plugins.backends.hf import HFGenerator

    given = {"prompts": 0}
    generate = HFGenerator.generate

    def counting(self, prompts, n, sampling):
        given["prompts"] += len(prompts)
        return generate(self, prompts, n, sampling)

    def take_metrics(self):
        count, given["prompts"] = given["prompts"], 0
        return {"prefix_cache/hit_frac": float(count)}

    monkeypatch.setattr(HFGenerator, "generate", counting)
    monkeypatch.setattr(HFGenerator, "take_metrics", take_metrics, raising=False)
    plain = make_config(output="plain")
    run(plain, host)
    with_eval = make_config(output="with_eval", data={"eval_path": str(eval_file)}, eval_steps=1)
    run(with_eval, host)

    def counts(config) -> list[float]:
        lines = read_metrics(config.training.output_dir)
        return [m["prefix_cache/hit_frac"] for m in lines if "reward" in m]

    assert len(counts(plain)) == 3 and all(c > 0 for c in counts(plain))
    assert counts(with_eval) == counts(plain)


@pytest.mark.slow
def test_resume_with_eval_gives_the_same_metrics(make_config, host, eval_file, monkeypatch):
    kw = {
        "data": {"eval_path": str(eval_file)},
        "eval_steps": 2,
        "eval_sampling": "train",
        "max_steps": 4,
        "save_steps": 3,
    }
    whole = make_config(output="whole", **kw)
    run(whole, host)
    split = make_config(output="split", **kw)
    with monkeypatch.context() as m:
        test_trainer._interrupt_after(m, 2)
        run(split, host)
    out = Path(split.training.output_dir)
    assert [x["step"] for x in read_metrics(out)] == [0, 1, 2]
    run(split, host, resume=True)
    got, expected = read_metrics(out), read_metrics(whole.training.output_dir)
    assert [x["step"] for x in got] == [0, 1, 2, 3, 4]
    assert comparable(got) == comparable(expected)


def test_max_minutes_keeps_room_for_the_closing_eval_and_runs_it(
    make_config, host, eval_file, monkeypatch, capsys
):
    """Steps "take" 10 minutes and evals 5 (a fake clock); the budget is 45. The step-0 eval
    ends at 5, steps 1-3 at 15, 25 and 35; a fourth step would fit (45) but not the eval after
    it (50), so the run saves step 3, evaluates it (as a planned end would) and ends at 40."""
    import rlvr.training.stopping as stopping
    import rlvr.training.trainer as trainer_module
    from rlvr.evaluation.loop import Evaluation
    from rlvr.outputs.checkpoint import latest_checkpoint

    now = {"t": 0.0}
    monkeypatch.setattr(stopping, "_clock", lambda: now["t"])
    train_step, eval_run = trainer_module.Trainer.train_step, Evaluation.run

    def timed_step(self):
        now["t"] += 600.0
        return train_step(self)

    def timed_eval(self, *args, **kwargs):
        now["t"] += 300.0
        return eval_run(self, *args, **kwargs)

    monkeypatch.setattr(trainer_module.Trainer, "train_step", timed_step)
    monkeypatch.setattr(Evaluation, "run", timed_eval)
    config = make_config(
        data={"eval_path": str(eval_file)}, eval_steps=5, eval_limit=2, max_steps=8, max_minutes=45
    )
    run(config, host)
    out = Path(config.training.output_dir)
    assert [m["step"] for m in read_metrics(out)] == [0, 1, 2, 3, 3]
    assert [m["step"] for m in eval_lines(out)] == [0, 3]
    assert latest_checkpoint(out).name == "checkpoint-3"
    assert now["t"] == 40 * 60
    err = capsys.readouterr()
    why = "40.0 min used, a step takes up to 10.0 min, an eval 5.0 min"
    assert f"stopped at step 3 (training.max_minutes=45: {why})" in err.out + err.err


def test_summaries_count_correct_and_format_compliant_completions(host):
    from rlvr.evaluation.loop import Evaluation

    config = load_config({"rewards": [{"name": "numbers"}, {"name": "format"}]}, host)
    scored = [(1.0, 1.0), (0.0, 1.0), (1.0, 0.0), (0.0, None)]  # (numbers, format) per sample
    records = [
        {
            "correct": n >= 1.0,
            "format_ok": is_format_ok({"numbers": n, "format": f}, format_checks(config)),
            "reward": n + (f or 0.0),
            "num_tokens": 5,
            "truncated": False,
        }
        for n, f in scored
    ]
    summary = Evaluation(config, prompts=[0, 1], k=2).summarize(records, [])
    assert summary["format_ok"] == 0.5 and summary["accuracy"] == 0.5
    assert summary["pass@1"] == 0.5 and summary["pass@2"] == 1.0  # each prompt has one right
    no_format = load_config({"rewards": [{"name": "numbers"}]}, host)
    assert "format_ok" not in Evaluation(no_format, prompts=[0, 1], k=2).summarize(records, [])
