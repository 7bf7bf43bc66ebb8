"""The console side of :class:`rlvr.outputs.metrics_logger.MetricsLogger`: a progress bar on a
terminal only, the step lines everywhere."""

from __future__ import annotations

import io
import json
import sys

import pytest

from rlvr.outputs.metrics import read_metrics
from rlvr.outputs.metrics_console import progress_figures, third_figure
from rlvr.outputs.metrics_logger import MetricsLogger
from rlvr.outputs.summary import SUMMARY_JSON, SUMMARY_TEXT, summary_data, write_summary


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _log_three_steps(tmp_path, capsys) -> str:
    """What a run of three steps prints (stdout and a captured, non-terminal stderr)."""
    logger = MetricsLogger(tmp_path, max_steps=3, logging_steps=1, progress=True)
    for step in (1, 2, 3):
        logger.log({"step": step, "reward": 0.5 * step, "loss": 0.1})
    logger.close()
    captured = capsys.readouterr()
    return captured.out + captured.err


def test_no_progress_bar_in_a_log_file(tmp_path, capsys):
    """Where stderr is no terminal (a log file, CI) every redraw would be another line."""
    printed = _log_three_steps(tmp_path, capsys)
    assert "\r" not in printed and "step/s" not in printed
    assert [line.split(" |")[0] for line in printed.splitlines()] == [
        "step 1/3",
        "step 2/3",
        "step 3/3",
    ]
    assert [m["step"] for m in read_metrics(tmp_path)] == [1, 2, 3]


def test_the_step_line_says_what_its_time_is(tmp_path, capsys):
    """#45 item 17: the step line ended in a bare time; it ends in seconds per step."""
    with MetricsLogger(tmp_path, max_steps=3, progress=False) as logger:
        logger.log({"step": 1, "reward": 0.5, "loss": 0.1, "step_time": 3.21})
    assert capsys.readouterr().err.strip().endswith("| loss 0.1 | 3.2 s/step")


def test_progress_bar_on_a_terminal(tmp_path, capsys, monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    printed = _log_three_steps(tmp_path, capsys)
    bar = terminal.getvalue()
    assert "3/3" in bar and "\r" in bar
    assert "step 3/3 |" in printed


def test_the_progress_bar_shows_figures_that_move(tmp_path, capsys, monkeypatch):
    """GRPO's loss is about 0 by construction: the bar shows the reward, the length and a
    third figure instead."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    logger = MetricsLogger(tmp_path, max_steps=2, progress=True)
    for step in (1, 2):
        logger.log(
            {
                "step": step,
                "reward": 0.25 * step,
                "loss": -1e-9,
                "completion_length/mean": 40.0 + step,
                "entropy": 0.5,
            }
        )
    logger.close()
    bar = terminal.getvalue().split("\r")[-2]  # the last redraw before close
    assert "reward=0.500" in bar and "len=42" in bar and "entropy=0.5" in bar
    assert "loss" not in bar


def _step(**m):
    return {"reward": 0.5, "completion_length/mean": 12.0, "entropy": 0.7, **m}


def test_the_third_figure_is_kl_else_a_moving_clip_fraction_else_entropy():
    # a reference model: its KL
    assert progress_figures(_step(kl=0.0123), third_figure(_step(kl=0.0123), None)) == {
        "reward": "0.500",
        "len": "12",
        "kl": "0.0123",
    }
    # one update per rollout: the clip fraction stays 0, the entropy is shown
    clip = "algo/grpo/clip_frac"
    third = third_figure(_step(**{clip: 0.0}), None)
    assert third == "entropy"
    # several: once the clip fraction leaves 0 it is shown, and stays (no flicker)
    third = third_figure(_step(**{clip: 0.02}), third)
    assert progress_figures(_step(**{clip: 0.02}), third)["clip"] == "0.02"
    assert third_figure(_step(**{clip: 0.0}), third) == clip


def test_the_summary_is_written_to_the_output_dir(tmp_path):
    logger = MetricsLogger(tmp_path, max_steps=20, progress=False)
    for step in range(1, 21):
        logger.log({"step": step, "reward": step / 10, "rewards/answer/mean": step / 20})
    logger.close()
    data = summary_data(tmp_path, ["answer"], 12.5)
    assert data["steps"] == 20 and data["window"] == 2
    assert data["rewards"]["answer"] == {
        "first": pytest.approx(0.075),
        "last": pytest.approx(0.975),
    }
    written = write_summary(tmp_path, data)
    assert written == [tmp_path / SUMMARY_JSON, tmp_path / SUMMARY_TEXT]
    assert json.loads((tmp_path / SUMMARY_JSON).read_text()) == data
    text = (tmp_path / SUMMARY_TEXT).read_text()
    assert text.startswith("run finished: 20 steps, 12 s") and "answer   0.075 -> 0.975" in text
