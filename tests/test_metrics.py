"""The console side of :class:`rlvr.outputs.metrics.MetricsLogger`: a progress bar on a terminal
only,
the step lines everywhere."""

from __future__ import annotations

import io
import sys

from rlvr.outputs.metrics import MetricsLogger, read_metrics


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


def test_progress_bar_on_a_terminal(tmp_path, capsys, monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    printed = _log_three_steps(tmp_path, capsys)
    bar = terminal.getvalue()
    assert "3/3" in bar and "\r" in bar
    assert "step 3/3 |" in printed
