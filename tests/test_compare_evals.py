"""examples/compare_evals.py: the before/after table of two `rlvr eval` runs."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "compare_evals.py"


def write(
    path: Path,
    correct: list[int],
    fmt: list[int],
    texts: list[str] | None = None,
    golds: list[str] | None = None,
) -> Path:
    path.mkdir()
    texts = texts or [f"working\n#### {i}" for i in range(len(correct))]
    rows = [
        {"index": i, "sample": 0, "correct": c, "format_ok": f, "num_tokens": 10, "truncated": 0}
        | {"completion": text, "rewards": {"answer": float(c), "format": float(f), "x": None}}
        | ({"row": {"answer": f"work\n#### {golds[i]}"}} if golds else {"row": {}})
        for i, (c, f, text) in enumerate(zip(correct, fmt, texts, strict=True))
    ]
    (path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_paired_difference_and_interval(tmp_path, capsys):
    tool = runpy.run_path(str(SCRIPT))
    # 4 of 8 improve, none gets worse: d = [1,1,1,1,0,0,0,0], mean 0.5, sd 0.5345
    mean, low, high = tool["paired"]([0.0] * 8, [1.0] * 4 + [0.0] * 4)
    assert mean == 0.5
    assert high - mean == pytest.approx(1.96 * 0.534522 / 8**0.5, rel=1e-5)
    assert low == pytest.approx(2 * mean - high)

    before = write(tmp_path / "before", [0, 0, 1, 0], [0, 1, 0, 0])
    copied = ["a\n#### 10", "b\n#### 10 \n", "c\n#### 3", "#### 10"]  # one answer, 3 times
    after = write(tmp_path / "after", [1, 0, 1, 0], [1, 1, 1, 1], copied)
    assert tool["main"]([str(before), str(after / "samples.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "| accuracy (pass@1) | 25.0% | 50.0% | +25.0 pts" in out
    assert "| format compliance | 25.0% | 100.0% | +75.0 pts" in out
    assert "| reward `answer` (mean) | 0.250 | 0.500 | +0.250 (" in out
    assert "| reward `format` (mean) | 0.250 | 1.000 | +0.750 (" in out
    assert "reward `x`" not in out  # None in every row: no mean
    assert "| commonest last line (collapse check) | `#### 0` 25.0% | `#### 10` 75.0% | |" in out


def test_different_prompts_are_refused(tmp_path, capsys):
    tool = runpy.run_path(str(SCRIPT))
    before = write(tmp_path / "before", [0, 1], [0, 1])
    after = write(tmp_path / "after", [0, 1, 1], [0, 1, 1])
    assert tool["main"]([str(before), str(after)]) == 2
    assert "not on the same prompts" in capsys.readouterr().err


def test_constant_answer_baseline_from_the_golds(tmp_path, capsys):
    """The commonest gold, answered every time, is the bar a collapsed policy can reach."""
    tool = runpy.run_path(str(SCRIPT))
    golds = ["6", "10", "6", "3", "6", "10", "1", "2"]
    before = write(tmp_path / "before", [0] * 8, [0] * 8, golds=golds)
    after = write(tmp_path / "after", [0] * 8, [1] * 8, golds=golds)
    assert tool["main"]([str(before), str(after)]) == 0
    assert "answering `6` to every question scores 37.5%" in capsys.readouterr().out


def test_no_baseline_without_golds(tmp_path, capsys):
    tool = runpy.run_path(str(SCRIPT))
    before = write(tmp_path / "before", [0, 1], [0, 1])
    after = write(tmp_path / "after", [0, 1], [1, 1])
    assert tool["main"]([str(before), str(after)]) == 0
    assert "constant-answer baseline" not in capsys.readouterr().out


def test_a_warning_names_the_settings_that_differ(tmp_path, capsys):
    """Evals in another dtype (model.dtype auto resolves per machine) are flagged, not refused."""
    tool = runpy.run_path(str(SCRIPT))
    before = write(tmp_path / "before", [0, 1], [0, 1])
    after = write(tmp_path / "after", [0, 1], [1, 1])
    common = {"device": "cpu", "temperature": 0.0, "max_completion_length": 192}
    (before / "summary.json").write_text(json.dumps(common | {"dtype": "float32"}))
    (after / "summary.json").write_text(json.dumps(common | {"dtype": "bfloat16"}))
    assert tool["main"]([str(before), str(after)]) == 0
    assert "warning: the evals differ in dtype (float32 vs bfloat16)" in capsys.readouterr().err

    (after / "summary.json").write_text(json.dumps(common | {"dtype": "float32"}))
    assert tool["main"]([str(before), str(after / "samples.jsonl")]) == 0
    assert "warning" not in capsys.readouterr().err


def test_samples_of_one_prompt_are_averaged_before_the_interval(tmp_path, capsys):
    """With -k 8 the prompt is the unit: 2 prompts x 4 samples are 2 differences, not 8."""
    tool = runpy.run_path(str(SCRIPT))
    # prompt 0 gains 3 of 4 samples (d = 0.75), prompt 1 gains 1 of 4 (d = 0.25)
    before, after = [0.0] * 8, [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    mean, low, high = tool["paired"](before, after, [0, 0, 0, 0, 1, 1, 1, 1])
    assert mean == 0.5
    sd = (2 * 0.25**2) ** 0.5  # of [0.75, 0.25] around 0.5, n - 1 = 1
    assert high - mean == pytest.approx(1.96 * sd / 2**0.5)
    assert tool["paired"](before, after)[2] - mean != pytest.approx(high - mean)


def test_accuracy_by_another_reward(tmp_path, capsys):
    """--accuracy LABEL: the share scoring >= 1 on that reward (partial credit is not right)."""
    tool = runpy.run_path(str(SCRIPT))
    for name, lenient in (("before", [0.0, 0.5, 1.0, None]), ("after", [1.0, 1.0, 1.0, 0.5])):
        rows = [
            {"index": i, "sample": 0, "correct": 0, "num_tokens": 5, "truncated": 0}
            | {"completion": "x", "rewards": {"strict": 0.0, "lenient": value}, "row": {}}
            for i, value in enumerate(lenient)
        ]
        (tmp_path / name).mkdir()
        (tmp_path / name / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = [str(tmp_path / "before"), str(tmp_path / "after"), "--accuracy", "lenient"]
    assert tool["main"](args) == 0
    out = capsys.readouterr().out
    assert "4 completions of 4 prompts" in out
    assert "| accuracy by `lenient` | 25.0% | 75.0% | +50.0 pts" in out
    assert tool["main"]([*args[:2], "--accuracy", "nope"]) == 0
    assert "accuracy by `nope`" not in capsys.readouterr().out
