"""The end of a run, in a few lines: where it is, how long it took, and what changed.

:func:`run_summary` reads ``OUTPUT_DIR/metrics.jsonl`` (so a resumed run summarises all its
steps), compares each reward's mean over the first 10% of the steps with the last 10%, and
shows the first and last in-training evaluation when there was one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from rlvr.outputs.checkpoint import latest_checkpoint
from rlvr.outputs.metrics import read_metrics


def window_means(values: Sequence[float]) -> tuple[float, float]:
    """The mean of the first and of the last 10% of ``values`` (at least one value each),
    ignoring NaN."""
    n = max(1, len(values) // 10)

    def mean(xs: Sequence[float]) -> float:
        xs = [x for x in xs if isinstance(x, int | float) and math.isfinite(x)]
        return sum(xs) / len(xs) if xs else math.nan

    return mean(values[:n]), mean(values[-n:])


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def run_summary(output_dir: str | Path, labels: Sequence[str], seconds: float) -> str:
    """The lines printed when a run ends."""
    out = Path(output_dir).absolute()
    try:
        rows = read_metrics(out)
    except FileNotFoundError:
        rows = []
    evals = [r for r in rows if "eval/reward_mean" in r]
    rows = [r for r in rows if "reward" in r]  # training steps (step 0 is evaluation only)
    ckpt = latest_checkpoint(out)
    steps = rows[-1]["step"] if rows else 0
    lines = [
        f"run finished: {steps} steps, {_duration(seconds)} (this session)",
        f"  output dir:  {out}",
        f"  checkpoint:  {ckpt if ckpt is not None else 'none'}",
    ]
    if rows:
        n = max(1, len(rows) // 10)
        lines.append(f"  reward means, first {n} -> last {n} steps:")
        width = max(len(label) for label in [*labels, "(total)"])
        for label, key in [*((lb, f"rewards/{lb}/mean") for lb in labels), ("(total)", "reward")]:
            first, last = window_means([r.get(key, math.nan) for r in rows])
            lines.append(f"    {label:<{width}}  {first:.3f} -> {last:.3f}")
    if evals:
        first_eval, last_eval = evals[0], evals[-1]

        def figures(r: dict) -> str:
            # pass@1 (the reward mean where no reward checks answers), format_ok
            first = (
                ("pass@1", "eval/pass@1") if "eval/pass@1" in r else ("reward", "eval/reward_mean")
            )
            shown = [
                f"{name} {r[key]:.3f}"
                for name, key in (first, ("format_ok", "eval/format_ok"))
                if isinstance(r.get(key), int | float)
            ]
            return ", ".join(shown)

        lines.append(
            f"  eval:        step {first_eval['step']}: {figures(first_eval)} -> "
            f"step {last_eval['step']}: {figures(last_eval)}"
        )
    else:
        lines.append(
            "  eval:        none during training (training.eval_steps); run `rlvr eval CONFIG "
            f"--checkpoint {out}` for pass@k on the eval split"
        )
    lines.append(f"  plots:       `rlvr plot {out}` draws them into {out / 'plots'}")
    return "\n".join(lines)


__all__ = ["run_summary", "window_means"]
