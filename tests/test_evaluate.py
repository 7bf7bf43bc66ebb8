"""rlvr.evaluation (the pass@j reported, eval data and checkpoint resolution, end to end on a
tiny model),
rlvr.outputs.plot, and the ``rlvr eval`` / ``rlvr plot`` commands."""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from rlvr import hookimpl
from rlvr.api.errors import ConfigWarning
from rlvr.api.host import create_host
from rlvr.api.registration import Params, Reward
from rlvr.cli.main import main
from rlvr.config.schema import DataConfig, load_config
from rlvr.evaluation.correctness import correctness
from rlvr.evaluation.errors import EvalError
from rlvr.evaluation.evaluate import evaluate
from rlvr.evaluation.loop import eval_call_sequences, pass_at_ks
from rlvr.evaluation.paths import eval_data, output_paths, resolve_checkpoint
from rlvr.evaluation.report import headline
from rlvr.functional import pass_at_k
from rlvr.model.loading import resolve_device_dtype
from rlvr.outputs.checkpoint import COMPLETE
from rlvr.outputs.plot import PlotError, moving_average, plot_run

PNG = b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- pass@k


def test_pass_at_ks_and_mean():
    assert pass_at_ks(1) == [1]
    assert pass_at_ks(2) == [1, 2]
    assert pass_at_ks(8) == [1, 2, 4, 8]
    assert pass_at_ks(10) == [1, 2, 4, 8, 10]


# --------------------------------------------------------------------------- resolution


def test_eval_data_decisions(tmp_path):
    train = tmp_path / "train.jsonl"
    test = tmp_path / "test.jsonl"
    for p in (train, test):
        p.write_text('{"prompt": "x", "answer": "1"}\n')
    data = DataConfig(path=str(train), max_samples=3)
    # a single file has no splits: used whole, with a warning that it is the training data
    with pytest.warns(ConfigWarning, match="TRAINING data"):
        cfg, split, desc = eval_data(data)
    assert (cfg.path, split, desc, cfg.max_samples) == (str(train), None, str(train), None)
    # a split that is a file path is the eval data
    cfg, split, _ = eval_data(data, str(test))
    assert (cfg.path, split) == (str(test), None)
    # asking a single file for a named split is an error
    with pytest.raises(EvalError, match="single file"):
        eval_data(data, "validation")
    # data.eval_path: used with its split; a directory or hub name keeps the split
    cfg, split, desc = eval_data(DataConfig(path=str(train), eval_path=str(tmp_path)))
    assert (cfg.path, split, desc) == (str(tmp_path), "test", f"{tmp_path} [test]")
    cfg, split, _ = eval_data(DataConfig(path="org/dataset", eval_split=None), None)
    assert (cfg.path, split) == ("org/dataset", "train")


def test_resolve_checkpoint_and_output_paths(tmp_path):
    run = tmp_path / "run"
    for step, complete in ((2, True), (4, True), (6, False)):
        d = run / f"checkpoint-{step}"
        d.mkdir(parents=True)
        (d / "config.json").write_text("{}")
        if complete:
            (d / COMPLETE).write_text("")
    assert resolve_checkpoint(run) == run / "checkpoint-4"
    assert resolve_checkpoint(run / "checkpoint-2") == run / "checkpoint-2"
    with pytest.raises(EvalError, match="does not exist"):
        resolve_checkpoint(tmp_path / "missing")
    with pytest.raises(
        EvalError, match=r"does not exist \(.*run holds checkpoint-2, checkpoint-4\)"
    ):
        resolve_checkpoint(run / "checkpoint-99")  # the complete ones, to pick from
    with pytest.raises(EvalError, match="neither"):
        resolve_checkpoint(tmp_path)

    class T:
        output_dir = str(tmp_path / "out")

    class C:
        training = T

    assert output_paths(C, None) == (
        tmp_path / "out" / "eval" / "base" / "samples.jsonl",
        tmp_path / "out" / "eval" / "base" / "summary.json",
    )
    assert output_paths(C, None, run / "checkpoint-4")[1] == (
        tmp_path / "out" / "eval" / "checkpoint-4" / "summary.json"
    )
    assert output_paths(C, None, tmp_path / "q8.gguf")[1].parent.name == "q8"
    assert output_paths(C, tmp_path / "e.jsonl") == (
        tmp_path / "e.jsonl",
        tmp_path / "e.summary.json",
    )
    assert output_paths(C, tmp_path / "dir")[1] == tmp_path / "dir" / "summary.json"


# --------------------------------------------------------------------------- end to end


class ParityParams(Params):
    correct: float = 1.0


def _parity(sample) -> float:
    return 1.0 if len(sample.completion) % 2 == 0 else 0.0


def parity_factory(params: ParityParams):
    return _parity


class ParityPlugin:
    @hookimpl
    def rlvr_register_rewards(self, register):
        register(
            Reward(
                name="parity",
                params=ParityParams,
                factory=parity_factory,
                description="1 when the completion has an even number of characters",
            )
        )


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from rlvr.model.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def eval_dir(tmp_path_factory) -> Path:
    """A directory with train/test splits of a tiny arithmetic set."""
    root = tmp_path_factory.mktemp("data")
    for split, offset in (("train", 0), ("test", 10)):
        rows = [
            {"question": f"What is {a} + {offset}?", "answer": str(a + offset), "id": a}
            for a in range(5)
        ]
        (root / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return root


def _raw(tiny_model, eval_dir, tmp_path, rewards=None, **training):
    t = {
        "output_dir": str(tmp_path / "run"),
        "max_completion_length": 12,
        "reward_workers": 0,
        "per_device_train_batch_size": 2,
        "num_generations": 4,
        "seed": 0,
    }
    t.update(training)
    return {
        "model": {"name_or_path": str(tiny_model)},
        "data": {"path": str(eval_dir), "prompt_field": "question", "chat_template": True},
        "rewards": rewards
        or [{"name": "parity", "correctness": True}, {"name": "format", "weight": 0.5}],
        "training": t,
    }


def test_evaluate_end_to_end(tiny_model, eval_dir, tmp_path):
    host = create_host(plugins=[ParityPlugin()])
    config = load_config(
        _raw(tiny_model, eval_dir, tmp_path), host, require=("model", "data", "rewards")
    )
    assert correctness(config, host=host) == ("parity", 1.0, "marked `correctness: true`")
    summary = evaluate(config, host, k=3, limit=4, progress=False)

    samples_path = tmp_path / "run" / "eval" / "base" / "samples.jsonl"
    assert summary["samples"] == str(samples_path)
    saved = json.loads((tmp_path / "run" / "eval" / "base" / "summary.json").read_text())
    assert saved == summary
    rows = [json.loads(line) for line in samples_path.read_text().splitlines()]
    assert len(rows) == 4 * 3 == summary["num_samples"]
    assert summary["num_prompts"] == 4 and summary["k"] == 3
    assert summary["split"] == "test" and summary["data"].endswith("[test]")
    # model.dtype auto depends on the machine: the summary records what it resolved to
    device, dtype = resolve_device_dtype("auto")
    assert (summary["device"], summary["dtype"]) == (device.type, str(dtype)[len("torch.") :])
    assert [r["index"] for r in rows] == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert [r["sample"] for r in rows] == [0, 1, 2] * 4
    for r in rows:
        assert {"prompt", "completion", "rewards", "reward", "correct", "row"} <= set(r)
        assert "What is" in r["prompt"] and "+ 1" in r["prompt"]  # test split (+ 10..)
        assert r["rewards"]["parity"] == (1.0 if len(r["completion"]) % 2 == 0 else 0.0)
        assert r["reward"] == pytest.approx(r["rewards"]["parity"] + 0.5 * r["rewards"]["format"])
        assert r["correct"] == (r["rewards"]["parity"] >= 1.0)
        assert 1 <= r["num_tokens"] <= 12

    # The numbers follow from the samples.
    correct = [[r["correct"] for r in rows if r["index"] == i] for i in range(4)]
    n_correct = sum(map(sum, correct))
    assert summary["accuracy"] == pytest.approx(n_correct / 12)
    assert summary["pass@1"] == pytest.approx(n_correct / 12)
    assert summary["pass@2"] == pytest.approx(sum(pass_at_k(3, sum(c), 2) for c in correct) / 4)
    assert summary["pass@3"] == pytest.approx(sum(any(c) for c in correct) / 4)
    assert summary["reward"] == pytest.approx(sum(r["reward"] for r in rows) / 12)
    parity = [r["rewards"]["parity"] for r in rows]
    assert summary["rewards/parity/mean"] == pytest.approx(sum(parity) / 12)
    assert summary["completion_length/mean"] == pytest.approx(
        sum(r["num_tokens"] for r in rows) / 12
    )
    assert 0 < n_correct < 12, "the test needs a mix of correct and wrong samples"

    # Same seed, same samples; another metric and threshold re-read the same completions.
    again = evaluate(
        config,
        host,
        k=3,
        limit=4,
        output=tmp_path / "other.jsonl",
        metric="format",
        threshold=0.0,
        progress=False,
    )
    other = [json.loads(x) for x in (tmp_path / "other.jsonl").read_text().splitlines()]
    assert [r["completion"] for r in other] == [r["completion"] for r in rows]
    assert (tmp_path / "other.summary.json").is_file()
    assert again["metric"] == "format" and again["pass@1"] == 1.0  # every value >= 0
    with pytest.raises(EvalError, match="not a configured reward"):
        evaluate(config, host, metric="nope", progress=False)
    with pytest.raises(EvalError, match="k must be"):
        evaluate(config, host, k=0, progress=False)


def test_correctness_follows_the_documented_rule_and_never_picks_a_format_reward():
    host = create_host(plugins=[ParityPlugin()])
    trl = str(Path(__file__).parent / "trl_rewards.py")

    def chosen(rewards, metric=None):
        config = load_config({"rewards": rewards}, host, training=False, allow_code=True)
        return correctness(config, metric, host=host)

    fmt, answer = {"name": "format"}, {"name": "answer"}
    # a plugin that checks answers, wherever it is; its `correct` param is the threshold
    assert chosen([fmt, {"name": "numbers", "params": {"correct": 2.0}}]) == (
        "numbers",
        2.0,
        "the numbers reward checks answers",
    )
    assert chosen([fmt, answer]).label == "answer"
    # marked, or --metric, wins (even a format reward, when named)
    assert chosen([{**fmt, "correctness": True}, answer]).label == "format"
    assert chosen([{**fmt, "correctness": True}, answer], metric="answer").rule == (
        "chosen with --metric"
    )
    # TRL-style callables: the one named for correctness or accuracy, not the format one
    strict = {"name": "callable", "label": "strict_format", "params": {"function": f"{trl}:record"}}
    gsm8k = {
        "name": "callable",
        "label": "gsm8k",
        "params": {"function": f"{trl}:correctness_reward_func"},
    }
    assert chosen([strict, gsm8k]) == ("gsm8k", 1.0, "a callable reward named for accuracy")
    accuracy_format = {**strict, "label": "accuracy_format"}
    assert chosen([accuracy_format]).label is None  # says format too: not taken
    # nothing checks answers: no accuracy, and the reason says how to get one
    none = chosen([fmt, {"name": "parity"}, strict])
    assert none.label is None and "mark one with `correctness: true`" in none.rule
    with pytest.raises(Exception, match=r"rewards\[0\] is marked too"):
        chosen([{**answer, "correctness": True}, {"name": "numbers", "correctness": True}])


def test_evals_before_and_after_never_overwrite_each_other(
    tiny_model, eval_dir, tmp_path, capsys, caplog
):
    """#45 item 15: `rlvr eval` with and without --checkpoint wrote to the same
    OUTPUT_DIR/eval/, the second replacing the first's samples and summary. Each gets a
    directory named by what it evaluated; a repeat goes beside it; --output still works."""
    cfg = tmp_path / "run.yaml"
    raw = _raw(tiny_model, eval_dir, tmp_path, rewards=[{"name": "answer"}])
    cfg.write_text(yaml.safe_dump(raw))
    evals = tmp_path / "run" / "eval"

    def run_eval(*args: str) -> str:
        assert main(["eval", str(cfg), "--limit", "2", *args]) == 0
        return capsys.readouterr().out

    out = run_eval()
    assert f"samples: {evals / 'base' / 'samples.jsonl'}" in out  # says where it wrote
    before = (evals / "base" / "summary.json").read_text()
    out = run_eval("--checkpoint", str(tiny_model))
    assert f"summary: {evals / tiny_model.name / 'summary.json'}" in out
    run_eval("--greedy")  # the same model again: beside the first, which stays
    assert (evals / "base" / "summary.json").read_text() == before
    assert json.loads((evals / "base-2" / "summary.json").read_text())["temperature"] == 0
    assert sorted(p.name for p in evals.iterdir()) == ["base", "base-2", tiny_model.name]
    out = run_eval("--output", str(tmp_path / "mine"))
    assert (tmp_path / "mine" / "summary.json").is_file() and "mine" in out
    with caplog.at_level("WARNING", logger="rlvr.evaluation.paths"):
        assert main(["eval", str(cfg), "--limit", "2", "--output", str(tmp_path / "mine")]) == 0
    assert f"--output: replacing {tmp_path / 'mine' / 'samples.jsonl'}" in caplog.text


def test_eval_with_trl_style_rewards_judges_by_the_correctness_one(
    tiny_model, eval_dir, tmp_path, capsys
):
    """Issue #36: with TRL-style rewards rlvr eval took the first (a format reward always 1)
    and printed accuracy 100%, saying nothing of which reward it used."""
    trl = str(Path(__file__).parent / "trl_rewards.py")
    rewards = [
        {"name": "callable", "label": "format_ok", "params": {"function": f"{trl}:record"}},
        {
            "name": "callable",
            "label": "gsm8k",
            "params": {"function": f"{trl}:correctness_reward_func", "format": "conversational"},
        },
    ]
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(_raw(tiny_model, eval_dir, tmp_path, rewards=rewards)))
    args = ["--limit", "4", "--output", str(tmp_path / "e"), "--allow-code"]
    assert main(["eval", str(cfg), *args]) == 0
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "e" / "summary.json").read_text())
    samples = [json.loads(x) for x in (tmp_path / "e" / "samples.jsonl").read_text().splitlines()]
    right = sum(r["rewards"]["gsm8k"] >= 1.0 for r in samples) / len(samples)
    assert summary["metric"] == "gsm8k" and summary["accuracy"] == right < 1.0
    assert all(r["rewards"]["format_ok"] == 1.0 for r in samples)  # what was taken before
    line = f"accuracy {100 * right:.1f}% (pass@1: reward 'gsm8k' >= 1, a callable reward named"
    assert out.startswith(line)


def test_eval_without_a_correctness_reward_reports_mean_rewards_and_says_so(
    tiny_model, eval_dir, tmp_path
):
    host = create_host(plugins=[ParityPlugin()])
    rewards = [{"name": "parity"}, {"name": "format"}]
    raw = _raw(tiny_model, eval_dir, tmp_path, rewards=rewards)
    config = load_config(raw, host, require=("model", "data", "rewards"))
    summary = evaluate(config, host, k=2, limit=2, progress=False)
    assert summary["metric"] is None and summary["threshold"] is None
    assert not [k for k in summary if k.startswith("pass@") or k == "accuracy"]
    assert summary["reward"] is not None and "rewards/parity/mean" in summary
    samples = [json.loads(x) for x in Path(summary["samples"]).read_text().splitlines()]
    assert all("correct" not in r for r in samples)
    line = headline(summary)
    assert line.startswith("no accuracy: no reward checks answers: mark one with `correctness:")
    assert f"reward {summary['reward']:.3f}" in line


def test_eval_call_size_follows_the_backend_and_the_config(tiny_model, eval_dir, tmp_path):
    host = create_host(plugins=[ParityPlugin()])
    assert not host.backends["hf"].capabilities.schedules_batches
    assert host.backends["vllm"].capabilities.schedules_batches
    t = load_config(_raw(tiny_model, eval_dir, tmp_path), host).training
    assert eval_call_sequences(t, schedules_batches=False) == 2 * 1 * 4  # a training step
    assert eval_call_sequences(t, schedules_batches=True) == 256
    big = t.model_copy(update={"per_device_train_batch_size": 40, "num_generations": 8})
    assert eval_call_sequences(big, schedules_batches=True) == 320  # a step, when larger
    mine = t.model_copy(update={"eval_batch_size": 3})
    assert eval_call_sequences(mine, schedules_batches=True) == 3

    # The calls the hf generator gets: a step's worth (8 completions, 4 prompts at k=2) by
    # default, eval_batch_size (3 completions: 1 prompt at k=2) when set. Greedy completions
    # do not depend on the call size.
    from rlvr.plugins.backends.hf import HFGenerator

    sizes: list[int] = []
    generate = HFGenerator.generate

    def recording(self, prompts, n, sampling):
        sizes.append(len(prompts) * n)
        return generate(self, prompts, n, sampling)

    outputs = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(HFGenerator, "generate", recording)
        for batch in (None, 3):
            raw = _raw(tiny_model, eval_dir, tmp_path, eval_batch_size=batch, temperature=0)
            config = load_config(raw, host)
            out = tmp_path / f"calls{batch}.jsonl"
            evaluate(config, host, k=2, limit=5, output=out, progress=False)
            outputs[batch] = [json.loads(x)["completion"] for x in out.read_text().splitlines()]
            sizes.append(0)
    assert sizes == [8, 2, 0, 2, 2, 2, 2, 2, 0]
    assert outputs[None] == outputs[3]


def test_evaluate_a_checkpoint_and_a_split_file(tiny_model, eval_dir, tmp_path):
    host = create_host(plugins=[ParityPlugin()])
    config = load_config(
        _raw(tiny_model, eval_dir, tmp_path, temperature=0),
        host,
        require=("model", "data", "rewards"),
    )
    run = tmp_path / "trained"
    ckpt = run / "checkpoint-7"
    shutil.copytree(tiny_model, ckpt)
    (ckpt / COMPLETE).write_text("")
    summary = evaluate(
        config, host, checkpoint=run, split=str(eval_dir / "train.jsonl"), k=1, progress=False
    )
    assert summary["model"] == str(ckpt)
    assert summary["split"] is None and summary["num_prompts"] == 5
    assert "pass@1" in summary and "pass@2" not in summary
    rows = [json.loads(x) for x in Path(summary["samples"]).read_text().splitlines()]
    assert all("+ 0?" in r["prompt"] for r in rows)  # the train file's questions


def test_cli_eval(tiny_model, eval_dir, tmp_path, capsys):
    raw = _raw(tiny_model, eval_dir, tmp_path, rewards=[{"name": "answer"}, {"name": "format"}])
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    out = tmp_path / "eval" / "samples.jsonl"
    code = main(["eval", str(cfg), "-k", "2", "--limit", "3", "--output", str(out), "--json"])
    assert code == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)  # --json: the summary, for scripts
    assert printed["metric"] == "answer" and printed["num_samples"] == 6
    assert {"pass@1", "pass@2", "reward", "rewards/answer/mean", "format_ok"} <= set(printed)
    samples = [json.loads(line) for line in out.read_text().splitlines()]
    compliant = sum(r["rewards"]["format"] >= 1.0 for r in samples) / len(samples)
    assert printed["format_ok"] == compliant == sum(r["format_ok"] for r in samples) / 6
    assert len(out.read_text().splitlines()) == 6
    assert json.loads((tmp_path / "eval" / "samples.summary.json").read_text()) == printed
    # without --json, the result for people: a few lines, the first naming the reward
    assert main(["eval", str(cfg), "-k", "2", "--limit", "3", "--output", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        f"accuracy {100 * printed['accuracy']:.1f}% (pass@1: reward 'answer' >= 1, the answer "
        f"reward checks answers) | format compliance {100 * compliant:.1f}% | reward "
        f"{printed['reward']:.3f} | 3 prompts x 2"
    )
    assert lines[1] == f"pass@1 {printed['pass@1']:.3f}  pass@2 {printed['pass@2']:.3f}"
    assert lines[2].startswith("reward means: answer ") and len(lines) <= 8
    assert lines[-1] == f"samples: {out}  summary: {printed['summary']}"
    # a named split of a single file is refused with a message, no traceback
    raw["data"]["path"] = str(eval_dir / "train.jsonl")
    cfg.write_text(yaml.safe_dump(raw))
    assert main(["eval", str(cfg), "--split", "validation"]) == 1
    assert "single file" in capsys.readouterr().err


def test_cli_greedy_eval_of_a_training_config_does_not_warn(
    tiny_model, eval_dir, tmp_path, capsys, monkeypatch
):
    """The docs' eval of a training config (docs/how-to/evaluate.md), greedy: no warning that
    grpo cannot learn."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # nor that a busy CI machine is busy
    raw = _raw(tiny_model, eval_dir, tmp_path, rewards=[{"name": "answer"}])
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({**raw, "algorithm": {"name": "grpo"}}))
    code = main(["eval", str(cfg), "--limit", "2", "--set", "training.temperature=0", "--json"])
    assert code == 0
    captured = capsys.readouterr()
    assert "warning" not in captured.err
    # --greedy is that --set: the same completions, temperature 0 in the summary
    greedy_eval = ["eval", str(cfg), "--limit", "2", "--greedy", "--output", str(tmp_path / "g")]
    assert main([*greedy_eval, "--json"]) == 0
    greedy = json.loads(capsys.readouterr().out)
    assert greedy["temperature"] == 0 == json.loads(captured.out)["temperature"]
    assert greedy["reward"] == json.loads(captured.out)["reward"]
    default = tmp_path / "run" / "eval" / "base" / "samples.jsonl"
    assert (tmp_path / "g" / "samples.jsonl").read_text() == default.read_text()
    # the same config trains with a warning: temperature 0 makes every group uniform
    assert main(["validate", str(cfg), "--set", "training.temperature=0"]) == 0
    assert "samples greedily" in capsys.readouterr().err


def test_eval_reports_reward_failures_and_goes_on(tiny_model, eval_dir, tmp_path, capsys):
    """A reward that raises on one row: the eval finishes, those samples get the fallback, the
    error is printed once with its traceback and recorded beside the samples with its row."""
    boom = f"{Path(__file__).parent / 'trl_rewards.py'}:boom_on_four"  # raises when answer is 4
    rewards = [{"name": "callable", "label": "four", "params": {"function": boom}}]
    host = create_host()
    config = load_config(
        _raw(tiny_model, eval_dir, tmp_path, rewards=rewards), host, require=("model", "data")
    )
    stale = tmp_path / "e" / "reward_errors.jsonl"  # an --output directory is replaced
    stale.parent.mkdir(parents=True)
    stale.write_text('{"from": "an earlier eval"}\n')
    summary = evaluate(
        config, host, split=str(eval_dir / "train.jsonl"), k=2, output=stale.parent, progress=False
    )  # answers 0..4
    assert summary["num_samples"] == 10 and summary["rewards/four/errors"] == 2
    assert summary["reward_errors"] == str(stale)
    (record,) = [json.loads(line) for line in stale.read_text().splitlines()]  # stale one gone
    assert record["reward"] == "four" and record["row"]["answer"] == "4"
    assert "cannot score" in record["error"] and "boom_on_four" in record["traceback"]
    samples = [json.loads(x) for x in Path(summary["samples"]).read_text().splitlines()]
    assert [r["rewards"]["four"] for r in samples if r["row"]["answer"] == "4"] == [0.0, 0.0]
    err = capsys.readouterr().err
    assert err.count("reward 'four' failed: ValueError: cannot score") == 1
    assert "reward 'four': 2 errors and 0 timeouts" in err and str(stale) in err

    # an eval whose rewards all succeed has no errors file
    summary = evaluate(config, host, k=1, limit=2, output=stale.parent, progress=False)
    assert summary["reward_errors"] is None and not stale.exists()


# --------------------------------------------------------------------------- plots


def _synthetic_metrics(path: Path, steps: int = 25) -> None:
    lines = []
    for s in range(1, steps + 1):
        lines.append(
            {
                "step": s,
                "reward": 0.1 * s,
                "reward_std": 0.2,
                "rewards/answer/mean": 0.02 * s,
                "rewards/format/mean": min(1.0, 0.05 * s),
                "rewards/format/std": 0.1,
                "loss": None if s == 3 else 0.01 * math.sin(s),  # a skipped step
                "grad_norm": "inf" if s == 4 else 1.0 / s,
                "learning_rate": 1e-6 * (1 - s / steps),
                "entropy": 2.0 - 0.01 * s,
                "kl": 0.001 * s,
                "clip_frac_low": 0.0,
                "clip_frac_high": 0.01,
                "completion_length/mean": 50 + s,
                "completion_length/min": 10,
                "completion_length/max": 100,
                "truncated_frac": 0.1,
                "zero_std_frac": 0.5,
                "step_time": 2.0,
                "generation_time": 1.5,
                "tokens_per_second": 300 + s,
                "peak_memory_mb": 1000 + s,
            }
        )
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"step": 26, "rew')


def test_plot_run_writes_pngs(tmp_path, capsys):
    _synthetic_metrics(tmp_path / "metrics.jsonl")
    paths = plot_run(tmp_path)
    names = [p.name for p in paths]
    assert names == ["rewards.png", "training.png", "completions.png", "throughput.png"]
    for p in paths:
        assert p.parent == tmp_path / "plots"
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 10_000
    # only what was logged is drawn: a run with rewards only gets one figure
    only = tmp_path / "only"
    only.mkdir()
    (only / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n{"step": 2, "reward": 1}\n')
    assert [p.name for p in plot_run(only)] == ["rewards.png"]
    # the CLI prints the paths
    assert main(["plot", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == [str(p) for p in paths]


def test_plot_reads_algorithm_metrics_by_their_new_and_old_names():
    from rlvr.outputs.plot import _figures

    def panels(keys):
        training = dict((title, series) for title, series, _ in _figures(set(keys))["training"])
        return training["KL"], training["clip fractions"]

    new = panels({"kl", "algo/grpo/approx_kl", "algo/grpo/clip_frac_low", "algo/grpo/loss"})
    assert new == (
        [("kl", "kl (reference)"), ("algo/grpo/approx_kl", "algo/grpo/approx_kl (old policy)")],
        [("algo/grpo/clip_frac_low", "clip_frac_low")],
    )
    old = panels({"kl", "approx_kl", "clip_frac_low", "loss"})  # runs logged before 0.2
    assert old == (
        [("kl", "kl (reference)"), ("approx_kl", "approx_kl (old policy)")],
        [("clip_frac_low", "clip_frac_low")],
    )


def test_plot_errors(tmp_path, monkeypatch, capsys):
    with pytest.raises(PlotError, match="metrics.jsonl"):
        plot_run(tmp_path)
    assert main(["plot", str(tmp_path)]) == 1
    assert "metrics.jsonl" in capsys.readouterr().err
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    with pytest.raises(PlotError, match=r"pip install 'rlvr\[plot\]'"):
        plot_run(tmp_path)


def test_moving_average():
    assert moving_average([1.0, 3.0, math.nan, 5.0], 2) == [1.0, 2.0, 2.0, 4.0]
    assert math.isnan(moving_average([math.nan, 1.0], 3)[0])
