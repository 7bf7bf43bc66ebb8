"""Draw a run's curves from ``OUTPUT_DIR/metrics.jsonl`` into ``OUTPUT_DIR/plots/*.png``.

:func:`plot_run` writes up to four figures, each panel only when its metrics were logged:

- ``rewards.png``: the weighted reward (mean ± std over the step's completions) and each
  reward's mean (``rewards/<label>/mean``);
- ``training.png``: loss, gradient norm (and the value model's), learning rate, entropy,
  KL (to the reference model, and the algorithm's ``algo/<name>/approx_kl``), the
  algorithm's clip fractions (runs logged before 0.2, without the ``algo/<name>/`` prefix,
  plot the same);
- ``completions.png``: completion length (mean, min-max band), truncated fraction, groups
  with zero reward spread and groups filtered by dynamic sampling;
- ``throughput.png``: completion tokens per second, time per step by phase, peak memory
  (the running maximum of the process, as logged);
- ``episodes.png`` (runs in a multi-turn environment, which log ``env/...``): the share of
  episodes that call a tool and the calls per episode, assistant turns per episode (the
  environment's own rewards are ``rewards/<name>/mean``, drawn with the others), and episode
  health: truncated share,
  failed episodes and episodes whose re-rendered conversation drifts from the trained tokens;
- ``eval.png`` (runs with ``training.eval_steps``): the eval split's mean reward, pass@1 and
  format compliance, and each reward's mean, at the steps that were evaluated.

A curve that is 0 at every step where 0 means "not in play" (:func:`zero_is_absent`: the KL
without a reference model or with one update per rollout, clip fractions, groups filtered
without dynamic sampling, failed or drifted episodes) is left out, and so is a panel left
without curves. Steps are whole numbers on every x axis. Noisy curves get a moving average
drawn over the faint raw values once a run has 20 steps. Where a run was resumed (the
``resumed_from`` its first line after the resume logged), every panel has a dotted vertical line
at the checkpoint's step: the process there is a new one, so e.g. the peak memory starts again.
Uses matplotlib's object API with the Agg canvas (no display, no global pyplot state); needs
the ``plot`` extra: ``pip install 'rlvr[plot]'``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.api.errors import RlvrError
from rlvr.outputs.metrics import LEGACY_ALGO_KEYS, METRICS_FILE, RESUMED_FROM

PLOTS_DIR = "plots"
SMOOTH_FROM = 20  # steps before a moving average is drawn
NO_SMOOTHING = frozenset({"learning_rate", "peak_memory_mb"})  # schedules, running maxima


def zero_is_absent(key: str) -> bool:
    """Whether 0 at every step of ``key`` means its mechanism is not in play, rather than a
    measurement worth a curve."""
    own = _algo_key(key)
    return (
        key in ("kl", "groups_filtered", "env/failed", "env/prefix_drift")
        or own == "approx_kl"
        or own.startswith("clip_frac")
    )


class PlotError(RlvrError, RuntimeError):
    """The run cannot be plotted (no metrics file, matplotlib missing)."""


# Panels per figure: (title, [(metric key, legend label)], y label).
Panel = tuple[str, list[tuple[str, str]], str]


def _figures(keys: set[str]) -> dict[str, list[Panel]]:
    reward_labels = sorted(
        k.removeprefix("rewards/").removesuffix("/mean")
        for k in keys
        if k.startswith("rewards/") and k.endswith("/mean")
    )
    # algo/<name>/clip_frac_low, ...; before 0.2 without the prefix (LEGACY_ALGO_KEYS).
    clip = sorted(k for k in keys if _algo_key(k).startswith("clip_frac"))
    approx_kl = sorted(k for k in keys if _algo_key(k) == "approx_kl")
    eval_labels = sorted(
        k.removeprefix("eval/rewards/").removesuffix("/mean")
        for k in keys
        if k.startswith("eval/rewards/") and k.endswith("/mean")
    )
    return {
        "rewards": [
            ("reward (weighted sum)", [("reward", "reward")], "reward"),
            (
                "per-reward means",
                [(f"rewards/{lab}/mean", lab) for lab in reward_labels],
                "mean",
            ),
        ],
        "training": [
            ("loss", [("loss", "loss")], ""),
            (
                "gradient norm (before clipping)",
                [("grad_norm", "policy"), ("value_grad_norm", "value")],
                "",
            ),
            ("learning rate", [("learning_rate", "lr")], ""),
            ("entropy", [("entropy", "entropy")], "nats/token"),
            (
                "KL",
                [("kl", "kl (reference)")] + [(k, f"{k} (old policy)") for k in approx_kl],
                "",
            ),
            ("clip fractions", [(k, _algo_key(k)) for k in clip], "fraction"),
        ],
        "completions": [
            ("completion length", [("completion_length/mean", "mean")], "tokens"),
            ("truncated fraction", [("truncated_frac", "truncated")], "fraction"),
            (
                "groups",
                [
                    ("zero_std_frac", "zero reward spread (fraction)"),
                    ("groups_filtered", "filtered (count)"),
                ],
                "",
            ),
        ],
        "throughput": [
            ("completion tokens per second", [("tokens_per_second", "tokens/s")], ""),
            (
                "time per step",
                [
                    ("step_time", "step"),
                    ("generation_time", "generation"),
                    ("scoring_time", "scoring"),
                    ("training_time", "training"),
                ],
                "seconds",
            ),
            ("peak memory (running maximum)", [("peak_memory_mb", "peak so far")], "MiB"),
        ],
        "episodes": [
            (
                "tool calls",
                [
                    ("env/tool_call_rate", "episodes calling a tool (fraction)"),
                    ("env/tool_calls_mean", "calls per episode"),
                ],
                "",
            ),
            ("assistant turns per episode", [("env/turns_mean", "turns")], "turns"),
            (
                "episode health",
                [
                    ("env/truncated_frac", "truncated (fraction)"),
                    ("env/failed", "failed (count)"),
                    ("env/prefix_drift", "re-render drift (count)"),
                ],
                "",
            ),
        ],
        "eval": [
            ("eval reward (weighted sum)", [("eval/reward_mean", "reward")], "reward"),
            (
                "eval pass@1 and format compliance",
                [("eval/pass@1", "pass@1"), ("eval/format_ok", "format_ok")],
                "fraction",
            ),
            (
                "eval per-reward means",
                [(f"eval/rewards/{lab}/mean", lab) for lab in eval_labels],
                "mean",
            ),
        ],
    }


def _algo_key(key: str) -> str:
    """The algorithm's own name of a metric: ``algo/grpo/approx_kl`` and the pre-0.2
    ``approx_kl`` / ``algo/clip_frac`` are ``approx_kl`` / ``clip_frac``; other keys: ``""``."""
    if key in LEGACY_ALGO_KEYS:
        return key.removeprefix("algo/")
    parts = key.split("/", 2)
    return parts[2] if len(parts) == 3 and parts[0] == "algo" else ""


def _number(value: Any) -> float:
    """A metric value as a float; null, ``"inf"`` strings and non-numbers become NaN."""
    if isinstance(value, bool) or value is None:
        return math.nan
    if isinstance(value, int | float):
        return float(value)
    return math.nan


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` finite values (NaN until one is seen)."""
    out, buf = [], []
    for v in values:
        if math.isfinite(v):
            buf.append(v)
            if len(buf) > window:
                buf.pop(0)
        out.append(sum(buf) / len(buf) if buf else math.nan)
    return out


def _read_rows(output_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of ``OUTPUT_DIR/metrics.jsonl``, skipping a last line cut short by a kill."""
    path = Path(output_dir) / METRICS_FILE
    if not path.is_file():
        raise PlotError(
            f"{path} does not exist; give the training.output_dir of a run (it holds "
            "metrics.jsonl once the first step has finished)"
        )
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    rows = [r for r in rows if isinstance(r, dict) and "step" in r]
    if not rows:
        raise PlotError(f"{path} has no steps yet")
    return rows


def _matplotlib() -> Any:
    try:  # optional extra (rlvr[plot]): only `rlvr plot` needs it
        import matplotlib
    except ImportError:
        raise PlotError(
            "plotting needs matplotlib: pip install 'rlvr[plot]'  (or pip install matplotlib)"
        ) from None
    from matplotlib.figure import Figure  # the optional extra, found above

    del matplotlib
    return Figure


def figure_panels(rows: Sequence[dict[str, Any]]) -> dict[str, list[Panel]]:
    """The panels of each figure that have something to show for ``rows`` (metrics.jsonl's
    lines): each curve with a finite value, but not one that is 0 throughout where 0 means
    absent (:func:`zero_is_absent`); a panel or figure without curves is left out."""
    keys = {k for r in rows for k in r}
    has = set()
    for key in keys:
        values = [x for x in (_number(r.get(key)) for r in rows) if math.isfinite(x)]
        if values and not (zero_is_absent(key) and all(v == 0 for v in values)):
            has.add(key)
    out = {}
    for name, panels in _figures(keys).items():
        kept = [
            (title, [(k, label) for k, label in lines if k in has], ylabel)
            for title, lines, ylabel in panels
        ]
        kept = [p for p in kept if p[1]]
        if kept:
            out[name] = kept
    return out


def draw(name: str, panels: list[Panel], rows: Sequence[dict[str, Any]], title: str) -> Any:
    """The matplotlib ``Figure`` of one figure's ``panels`` over ``rows``."""
    Figure = _matplotlib()
    steps = [_number(r["step"]) for r in rows]
    resumes = resume_steps(rows)
    cols = min(3, len(panels)) if len(panels) != 4 else 2
    nrows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(5.0 * cols, 3.4 * nrows), layout="constrained")
    fig.suptitle(title)
    for i, (panel_title, lines, ylabel) in enumerate(panels):
        ax = fig.add_subplot(nrows, cols, i + 1)
        for key, label in lines:
            values = [_number(r.get(key)) for r in rows]
            if key.startswith("eval/"):  # a few steps: only those
                points = [(x, y) for x, y in zip(steps, values, strict=True) if math.isfinite(y)]
                _draw(ax, [x for x, _ in points], [y for _, y in points], label, None, False)
            else:
                _draw(ax, steps, values, label, _band(key, rows), key not in NO_SMOOTHING)
        for j, at in enumerate(resumes):
            ax.axvline(at, color="grey", linestyle=":", label="resumed" if j == 0 else None)
        ax.set_title(panel_title)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(_integer_locator())  # steps are whole numbers
        if ylabel:
            ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if len(lines) > 1 or name in ("rewards", "eval") and i > 0 or name == "episodes" or resumes:
            ax.legend(fontsize="small")
    return fig


def resume_steps(rows: Sequence[dict[str, Any]]) -> list[float]:
    """The steps of the checkpoints the run was resumed from, in order (each resume's first
    line logs ``resumed_from``)."""
    steps = (_number(r.get(RESUMED_FROM)) for r in rows)
    return sorted({s for s in steps if math.isfinite(s)})


def _integer_locator() -> Any:
    from matplotlib.ticker import MaxNLocator  # matplotlib is the optional plot extra

    return MaxNLocator(integer=True)


def plot_run(output_dir: str | Path) -> list[Path]:
    """Write the run's figures (see the module docstring) to ``OUTPUT_DIR/plots/`` and return
    their paths. Raises :class:`PlotError` when there is no ``metrics.jsonl`` or matplotlib is
    not installed."""
    _matplotlib()
    out_dir = Path(output_dir)
    rows = _read_rows(out_dir)
    plots = out_dir / PLOTS_DIR
    plots.mkdir(parents=True, exist_ok=True)
    written = []
    for name, panels in figure_panels(rows).items():
        title = f"{out_dir.resolve().name}: {name}  ({len(rows)} steps)"
        path = plots / f"{name}.png"
        draw(name, panels, rows, title).savefig(path, dpi=100)
        written.append(path)
    return written


def _band(key: str, rows: Sequence[dict[str, Any]]) -> tuple[list[float], list[float]] | None:
    """A shaded band for ``key``: ± std for the reward, min-max for the completion length."""

    def series(name: str) -> list[float]:
        return [_number(r.get(name)) for r in rows]

    if key == "reward" and any("reward_std" in r for r in rows):
        mean, std = series("reward"), series("reward_std")
        return [m - s for m, s in zip(mean, std, strict=True)], [
            m + s for m, s in zip(mean, std, strict=True)
        ]
    if key == "completion_length/mean" and any("completion_length/min" in r for r in rows):
        low = series("completion_length/min")
        has_max = any("completion_length/max" in r for r in rows)
        return low, series("completion_length/max") if has_max else low
    return None


def _draw(
    ax: Any,
    steps: list[float],
    values: list[float],
    label: str,
    band: tuple[list[float], list[float]] | None = None,
    smoothable: bool = True,
) -> None:
    smooth = smoothable and sum(math.isfinite(v) for v in values) >= SMOOTH_FROM
    marker = "o" if len(values) <= 30 else None
    (line,) = ax.plot(
        steps,
        values,
        label=None if smooth else label,
        alpha=0.35 if smooth else 1.0,
        marker=marker,
        markersize=3,
        linewidth=1.0,
    )
    if band is not None:
        ax.fill_between(steps, band[0], band[1], color=line.get_color(), alpha=0.15, linewidth=0)
    if smooth:
        window = max(5, len(values) // 20)
        ax.plot(
            steps,
            moving_average(values, window),
            color=line.get_color(),
            label=f"{label} (mean of {window})",
            linewidth=1.8,
        )


__all__ = [
    "PLOTS_DIR",
    "PlotError",
    "draw",
    "figure_panels",
    "moving_average",
    "plot_run",
    "resume_steps",
    "zero_is_absent",
]
