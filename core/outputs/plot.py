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
- ``throughput.png``: completion tokens per second, time per step by phase, peak memory;
- ``eval.png`` (runs with ``training.eval_steps``): the eval split's mean reward, pass@1 and
  format compliance, and each reward's mean, at the steps that were evaluated.

Noisy curves get a moving average drawn over the faint raw values once a run has 20 steps.
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
from rlvr.outputs.metrics import LEGACY_ALGO_KEYS, METRICS_FILE

PLOTS_DIR = "plots"
SMOOTH_FROM = 20  # steps before a moving average is drawn
NO_SMOOTHING = frozenset({"learning_rate", "peak_memory_mb"})  # schedules, running maxima


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
            ("peak memory", [("peak_memory_mb", "peak")], "MiB"),
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


def plot_run(output_dir: str | Path) -> list[Path]:
    """Write the run's figures (see the module docstring) to ``OUTPUT_DIR/plots/`` and return
    their paths. Raises :class:`PlotError` when there is no ``metrics.jsonl`` or matplotlib is
    not installed."""
    Figure = _matplotlib()
    out_dir = Path(output_dir)
    rows = _read_rows(out_dir)
    steps = [_number(r["step"]) for r in rows]
    keys = {k for r in rows for k in r}
    series = {k: [_number(r.get(k)) for r in rows] for k in keys}
    has = {k for k, v in series.items() if any(math.isfinite(x) for x in v)}
    plots = out_dir / PLOTS_DIR
    plots.mkdir(parents=True, exist_ok=True)
    written = []
    for name, panels in _figures(keys).items():
        panels = [p for p in panels if any(k in has for k, _ in p[1])]
        if not panels:
            continue
        cols = min(3, len(panels)) if len(panels) != 4 else 2
        nrows = math.ceil(len(panels) / cols)
        fig = Figure(figsize=(5.0 * cols, 3.4 * nrows), layout="constrained")
        fig.suptitle(f"{out_dir.resolve().name}: {name}  ({len(rows)} steps)")
        for i, (title, lines, ylabel) in enumerate(panels):
            ax = fig.add_subplot(nrows, cols, i + 1)
            for key, label in lines:
                if key in has and key.startswith("eval/"):  # a few steps: only those
                    xs, ys = zip(
                        *(
                            (x, y)
                            for x, y in zip(steps, series[key], strict=True)
                            if math.isfinite(y)
                        ),
                        strict=True,
                    )
                    _draw(ax, list(xs), list(ys), label, None, smoothable=False)
                elif key in has:
                    _draw(
                        ax, steps, series[key], label, _band(key, series), key not in NO_SMOOTHING
                    )
            ax.set_title(title)
            ax.set_xlabel("step")
            if ylabel:
                ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
            if sum(k in has for k, _ in lines) > 1 or name in ("rewards", "eval") and i > 0:
                ax.legend(fontsize="small")
        path = plots / f"{name}.png"
        fig.savefig(path, dpi=100)
        written.append(path)
    return written


def _band(key: str, series: dict[str, list[float]]) -> tuple[list[float], list[float]] | None:
    """A shaded band for ``key``: ± std for the reward, min-max for the completion length."""
    if key == "reward" and "reward_std" in series:
        mean, std = series["reward"], series["reward_std"]
        return [m - s for m, s in zip(mean, std, strict=True)], [
            m + s for m, s in zip(mean, std, strict=True)
        ]
    if key == "completion_length/mean" and "completion_length/min" in series:
        return series["completion_length/min"], series.get(
            "completion_length/max", series["completion_length/min"]
        )
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


__all__ = ["PLOTS_DIR", "PlotError", "moving_average", "plot_run"]
