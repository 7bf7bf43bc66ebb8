"""``rlvr plot``: which panels a run's metrics fill, and how the axes read."""

from __future__ import annotations

import pytest

from rlvr.outputs.metrics import read_metrics
from rlvr.outputs.metrics_logger import MetricsLogger
from rlvr.outputs.plot import draw, figure_panels, plot_run

pytest.importorskip("matplotlib")


def _rows(steps: int = 3, **extra) -> list[dict]:
    """GRPO's metrics at beta 0 with one update per rollout: no KL to a reference, and the
    old-policy KL and clip fractions 0 at every step."""
    return [
        {
            "step": s,
            "reward": 0.1 * s,
            "reward_std": 0.3,
            "loss": 1e-9,
            "grad_norm": 0.5,
            "algo/grpo/approx_kl": 0.0,
            "algo/grpo/clip_frac": 0.0,
            "algo/grpo/clip_frac_low": 0.0,
            "groups_filtered": 0,
            "zero_std_frac": 0.0,
            "peak_memory_mb": 600.0 + s,
            **{k: v(s) if callable(v) else v for k, v in extra.items()},
        }
        for s in range(1, steps + 1)
    ]


def _titles(panels: dict) -> dict[str, list[str]]:
    return {name: [title for title, _, _ in p] for name, p in panels.items()}


def test_panels_that_carry_nothing_are_left_out():
    titles = _titles(figure_panels(_rows()))
    assert "KL" not in titles["training"] and "clip fractions" not in titles["training"]
    assert titles["training"] == ["loss", "gradient norm (before clipping)"]
    groups = dict((t, lines) for t, lines, _ in figure_panels(_rows())["completions"])["groups"]
    assert groups == [("zero_std_frac", "zero reward spread (fraction)")]  # 0 there is a value


def test_panels_that_do_carry_something_stay():
    rows = _rows(kl=lambda s: 0.01 * s, **{"algo/grpo/clip_frac": lambda s: 0.1 if s > 1 else 0.0})
    panels = {t: lines for t, lines, _ in figure_panels(rows)["training"]}
    assert [k for k, _ in panels["KL"]] == ["kl"]  # the always-0 old-policy KL still left out
    assert [k for k, _ in panels["clip fractions"]] == ["algo/grpo/clip_frac"]


def test_steps_are_whole_numbers_and_peak_memory_a_running_maximum():
    rows = _rows(steps=3)
    panels = figure_panels(rows)
    fig = draw("throughput", panels["throughput"], rows, "run: throughput")
    (ax,) = fig.axes
    assert ax.get_title() == "peak memory (running maximum)"
    ticks = [t for t in ax.get_xticks() if 1 <= t <= 3]
    assert ticks == [1, 2, 3]  # not 1.0, 1.25, 1.5, ...
    assert [line.get_label() for line in ax.get_lines()] == ["peak so far"]


def test_a_resume_is_recorded_and_marked_on_every_panel(tmp_path):
    """#45 item 13: a resumed run's peak memory drops (a new process) where it resumed: the
    first line after the resume records the checkpoint's step, and the plots mark it."""
    rows = _rows(steps=4)
    with MetricsLogger(tmp_path, max_steps=4, progress=False) as logger:
        for row in rows[:3]:
            logger.log(row)
    with MetricsLogger(tmp_path, max_steps=4, start_step=2, progress=False) as logger:
        for row in rows[2:]:
            logger.log({**row, "peak_memory_mb": 10.0})
    logged = read_metrics(tmp_path)
    assert [(m["step"], m.get("resumed_from")) for m in logged] == [
        (1, None),
        (2, None),
        (3, 2),
        (4, None),
    ]
    for name, panels in figure_panels(logged).items():
        fig = draw(name, panels, logged, name)
        for ax in fig.axes:
            marks = [line for line in ax.get_lines() if line.get_label() == "resumed"]
            assert len(marks) == 1 and list(marks[0].get_xdata()) == [2, 2], ax.get_title()
    unresumed = _rows(steps=4)
    fig = draw("throughput", figure_panels(unresumed)["throughput"], unresumed, "t")
    assert all(line.get_label() != "resumed" for line in fig.axes[0].get_lines())


def test_plot_run_draws_from_the_metrics_file(tmp_path):
    with MetricsLogger(tmp_path, max_steps=3, progress=False) as logger:
        for row in _rows():
            logger.log(row)
    names = sorted(p.name for p in plot_run(tmp_path))
    assert names == ["completions.png", "rewards.png", "throughput.png", "training.png"]


def test_episode_metrics_get_a_figure(tmp_path):
    """A multi-turn run's env/... metrics (tool-call rate, turns) are drawn in episodes.png;
    failed and drifted episodes only when there were some."""
    env = {
        "env/episodes": 64.0,
        "env/failed": 0.0,
        "env/prefix_drift": 0.0,
        "env/truncated_frac": lambda s: 0.01 * s,
        "env/tool_call_rate": lambda s: 0.2 * s,
        "env/tool_calls_mean": lambda s: 0.25 * s,
        "env/turns_mean": lambda s: 1.0 + 0.2 * s,
    }
    rows = _rows(**env)
    panels = {t: [k for k, _ in lines] for t, lines, _ in figure_panels(rows)["episodes"]}
    assert panels == {
        "tool calls": ["env/tool_call_rate", "env/tool_calls_mean"],
        "assistant turns per episode": ["env/turns_mean"],
        "episode health": ["env/truncated_frac"],
    }
    with MetricsLogger(tmp_path, max_steps=3, progress=False) as logger:
        for row in rows:
            logger.log(row)
    assert "episodes.png" in [p.name for p in plot_run(tmp_path)]
    assert "episodes" not in figure_panels(_rows())  # single-turn runs: no such figure
