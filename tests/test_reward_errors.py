"""Reward failures are visible: the first traceback of each distinct error is printed once and
written to OUTPUT_DIR/reward_errors.jsonl with its sample, each failing step says so, and the
run stops (with a checkpoint) on ``on_error: raise`` or past ``max_reward_error_frac``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))  # bad_rewards, importable here and in the reward workers

import bad_rewards as br  # noqa: E402
import test_trainer  # noqa: E402

from rlvr.api.registration import Sample  # noqa: E402
from rlvr.cli.main import main  # noqa: E402
from rlvr.outputs.checkpoint import list_checkpoints  # noqa: E402
from rlvr.rewards.failures import ERRORS_FILE, RewardError, RewardErrorLog  # noqa: E402
from rlvr.rewards.scoring import ScoreEntry, Scorer  # noqa: E402
from rlvr.training.launch import train  # noqa: E402

# The tiny model, the 16-row dataset and the config builder of the trainer tests.
tiny_model, dataset = test_trainer.tiny_model, test_trainer.dataset
host, make_config = test_trainer.host, test_trainer.make_config

SAMPLES = [Sample(completion=f"c{i}", row={"answer": a}) for i, a in enumerate("434")]
BOOM = f"{TESTS / 'trl_rewards.py'}:boom_on_four"


def _score(log: RewardErrorLog, entries: list[ScoreEntry], rounds: int = 2) -> list:
    with Scorer(entries, workers=1) as scorer:  # a worker process: the traceback crosses over
        out = []
        for step in range(1, rounds + 1):
            scores = scorer.score(SAMPLES)
            out.append(scores)
            log.report(scores, SAMPLES, step=step)
    return out


def test_first_traceback_once_with_its_sample(tmp_path):
    entries = [ScoreEntry("four", br.raises_on_four, fallback=-1.0)]
    printed: list[str] = []
    scores = _score(RewardErrorLog(entries, tmp_path, echo=printed.append), entries)
    assert scores[1].per_reward["four"] == [-1.0, 1.0, -1.0]
    tracebacks = [p for p in printed if "Traceback" in p]
    assert len(tracebacks) == 1  # one distinct error, two rounds: printed once
    assert "no rule for answer 4" in tracebacks[0] and "bad_rewards.py" in tracebacks[0]
    counts = [p for p in printed if "2 errors and 0 timeouts in 3 calls" in p]
    assert [c.split(":")[0] for c in counts] == ["step 1", "step 2"]  # every failing round
    (record,) = [json.loads(line) for line in (tmp_path / ERRORS_FILE).read_text().splitlines()]
    assert record["reward"] == "four" and record["step"] == 1
    assert record["error"] == "ValueError: no rule for answer 4"
    assert record["completion"] == "c0" and record["row"] == {"answer": "4"}
    assert "raise ValueError" in record["traceback"]


def test_on_error_raise_and_error_fraction_stop(tmp_path):
    entries = [ScoreEntry("four", br.raises_on_four, on_error="raise")]
    log = RewardErrorLog(entries, tmp_path, echo=lambda m: None)
    with pytest.raises(RewardError, match=r"rewards\[0\].on_error is 'raise'"):
        _score(log, entries, rounds=1)
    entries = [ScoreEntry("four", br.raises_on_four)]
    log = RewardErrorLog(entries, tmp_path, max_error_frac=0.5, echo=lambda m: None)
    with pytest.raises(RewardError, match="failed on 2 of 3 calls, more than"):
        _score(log, entries, rounds=1)
    log = RewardErrorLog(entries, tmp_path, max_error_frac=0.7, echo=lambda m: None)
    _score(log, entries, rounds=1)  # 2 of 3 is within the limit


def test_rewards_score_writes_the_error_into_the_row(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(
        f"rewards:\n  - {{name: callable, label: four, params: {{function: '{BOOM}'}}}}\n"
    )
    src, out = tmp_path / "rows.jsonl", tmp_path / "scored.jsonl"
    rows = [{"prompt": f"q{a}", "completion": "4", "answer": a} for a in "43"]  # 2 prompts
    src.write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = ["rewards", "score", "-c", str(config), "-i", str(src), "-o", str(out)]
    assert main([*args, "--allow-code"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[0]["reward_errors"] == {"four": "ValueError: cannot score '4'"}
    assert "reward_errors" not in rows[1] and rows[1]["rewards"] == {"four": 0.0}
    err = capsys.readouterr().err
    assert err.count("Traceback") == 1 and "1 errors and 0 timeouts in 2 calls" in err


def _rewards():
    # batch: group: one call per prompt's completions (a raise fails that call's completions)
    four = {"name": "callable", "label": "four", "params": {"function": BOOM, "batch": "group"}}
    return [{"name": "toy"}, four]


def test_a_run_stops_past_the_error_limit_with_a_checkpoint(make_config, host, capsys):
    # Rows in order, 2 prompts x 4 completions a step: step 2 holds row 2 (answer 4), so the
    # reward fails on 4 of 8 completions (one call), more than the limit of 0.25: scoring stops.
    config = make_config(
        rewards=_rewards(), data={"shuffle": False}, max_reward_error_frac=0.25, using=host
    )
    with pytest.raises(RewardError, match=r"failed on 4 of 8 calls \(scoring stopped there\)"):
        train(config, host, progress=False)
    out = Path(config.training.output_dir)
    assert [p.name for p in list_checkpoints(out)] == ["checkpoint-1"]
    (record,) = [json.loads(line) for line in (out / ERRORS_FILE).read_text().splitlines()]
    assert record["step"] == 2 and record["row"]["answer"] == "4"
    err = capsys.readouterr()
    text = err.out + err.err
    assert text.count("Traceback") == 1 and "cannot score" in text


def test_a_run_reports_failing_steps_and_ends_with_a_summary(make_config, host, capsys):
    config = make_config(rewards=_rewards(), data={"shuffle": False}, using=host)
    train(config, host, progress=False)
    text = "".join(capsys.readouterr())
    assert "step 2: reward 'four': 4 errors and 0 timeouts in 8 calls" in text
    assert "step 1: reward 'four'" not in text  # steps without failures stay quiet
    assert "run finished: 3 steps" in text
    assert str(Path(config.training.output_dir) / "checkpoint-3") in text
    summary = text[text.index("run finished") :]
    assert "toy" in summary and "four" in summary and "rlvr plot" in summary
    assert "| toy " in text  # per-reward means on the periodic console line
