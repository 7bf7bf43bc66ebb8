"""The end of a run, in a few lines: where it is, how long it took, and what changed.

:func:`summary_data` reads ``OUTPUT_DIR/metrics.jsonl`` (so a resumed run summarises all its
steps), compares each reward's mean over the first 10% of the steps with the last 10%, and
keeps the first and last in-training evaluation when there was one; :func:`format_summary`
writes it as the lines ``rlvr train`` prints. ``rlvr.Trainer.train()`` returns the data, and
:func:`write_summary` keeps both in the run's directory (``run_summary.json``,
``run_summary.txt``), where the console's lines may long have scrolled away.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.outputs.checkpoint import best_checkpoint, latest_checkpoint
from rlvr.outputs.metrics import read_metrics

#: The summary's files in ``training.output_dir``.
SUMMARY_JSON = "run_summary.json"
SUMMARY_TEXT = "run_summary.txt"


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


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def summary_data(
    output_dir: str | Path, labels: Sequence[str], seconds: float, *, collapse: Any = None
) -> dict[str, Any]:
    """The run's summary: ``steps`` (the last training step), ``seconds`` (this session),
    ``output_dir``, ``checkpoint`` (the latest, or None), ``window`` (steps per window),
    ``rewards`` (per label, and ``(total)`` for the weighted reward: the ``first`` and ``last``
    window's mean; None where no value was finite), ``eval`` (``first`` and ``last``: the step
    and its ``eval/`` metrics without the prefix; None without in-training evaluation) and
    ``last`` (the last training step's metrics), ``best`` (``training.keep_best``'s checkpoint:
    step, metric, value, path; or None) and ``collapse`` (what tripped the collapse guard,
    :class:`rlvr.training.collapse.Collapse` as a dict; or None)."""
    out = Path(output_dir).absolute()
    try:
        rows = read_metrics(out)
    except FileNotFoundError:
        rows = []
    evals = [r for r in rows if "eval/reward_mean" in r]
    rows = [r for r in rows if "reward" in r]  # training steps (step 0 is evaluation only)
    ckpt = latest_checkpoint(out)
    best = best_checkpoint(out)
    rewards: dict[str, dict[str, float | None]] = {}
    for label, key in [*((lb, f"rewards/{lb}/mean") for lb in labels), ("(total)", "reward")]:
        first, last = window_means([r.get(key, math.nan) for r in rows])
        rewards[label] = {"first": _finite(first), "last": _finite(last)}

    def eval_line(r: dict[str, Any]) -> dict[str, Any]:
        return {"step": r["step"], **{k[5:]: v for k, v in r.items() if k.startswith("eval/")}}

    return {
        "steps": rows[-1]["step"] if rows else 0,
        "seconds": round(seconds, 3),
        "output_dir": str(out),
        "checkpoint": str(ckpt) if ckpt is not None else None,
        "window": max(1, len(rows) // 10),
        "rewards": rewards if rows else {},
        "eval": {"first": eval_line(evals[0]), "last": eval_line(evals[-1])} if evals else None,
        "last": rows[-1] if rows else {},
        "best": {**best, "path": str(best["path"])} if best is not None else None,
        "collapse": (
            {"signal": collapse.signal, "step": collapse.step, "message": collapse.message}
            if collapse is not None
            else None
        ),
    }


def _number(x: Any) -> str:
    return f"{x:.3f}" if isinstance(x, int | float) else "none"


def _ending(data: dict[str, Any]) -> str:
    """How the run ended: it finished, or it stopped early and why (``stopped``)."""
    why = data.get("stopped")
    return f"run stopped early ({why}; --resume continues it)" if why else "run finished"


def format_summary(data: dict[str, Any]) -> str:
    """The lines printed when a run ends, from :func:`summary_data`."""
    out = data["output_dir"]
    lines = []
    if data.get("collapse"):  # first: a run that destroyed its policy must not read as success
        c = data["collapse"]
        lines += [
            f"WARNING: the policy may have collapsed at step {c['step']} (collapse guard, "
            f"{c['signal']}): {c['message']}.",
            "  Check the model before using it: `rlvr eval CONFIG --checkpoint ...` against "
            "the base model.",
        ]
    lines += [
        f"{_ending(data)}: {data['steps']} steps, {_duration(data['seconds'])} (this session)",
        f"  output dir:  {out}",
        f"  checkpoint:  {data['checkpoint'] or 'none'}",
    ]
    if data.get("best"):
        b = data["best"]
        lines.append(
            f"  best:        {b['path']} ({b['metric']} {b['value']:.3f} at step {b['step']}, "
            "training.keep_best)"
        )
    if data["rewards"]:
        n = data["window"]
        lines.append(f"  reward means, first {n} -> last {n} steps:")
        width = max(len(label) for label in data["rewards"])
        for label, means in data["rewards"].items():
            if means["first"] is None and means["last"] is None:  # e.g. every episode failed
                lines.append(f"    {label:<{width}}  none (no scored sample in those steps)")
                continue
            lines.append(
                f"    {label:<{width}}  {_number(means['first'])} -> {_number(means['last'])}"
            )
    if data["eval"]:
        first_eval, last_eval = data["eval"]["first"], data["eval"]["last"]

        def figures(r: dict[str, Any]) -> str:
            # pass@1 (the reward mean where no reward checks answers), format_ok
            first = ("pass@1", "pass@1") if "pass@1" in r else ("reward", "reward_mean")
            shown = [
                f"{name} {r[key]:.3f}"
                for name, key in (first, ("format_ok", "format_ok"))
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
    lines.append(f"  plots:       `rlvr plot {out}` draws them into {Path(out) / 'plots'}")
    return "\n".join(lines)


def write_summary(output_dir: str | Path, data: dict[str, Any]) -> list[Path]:
    """Write ``data`` (:func:`summary_data`) as :data:`SUMMARY_JSON` and, as printed, as
    :data:`SUMMARY_TEXT` into ``output_dir`` (each replaced whole: a resumed run's summary
    covers all its steps); returns their paths."""
    out = Path(output_dir)
    written = []
    for name, text in (
        (SUMMARY_JSON, json.dumps(data, indent=2) + "\n"),
        (SUMMARY_TEXT, format_summary(data) + "\n"),
    ):
        path = out / name
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        written.append(path)
    return written


def run_summary(output_dir: str | Path, labels: Sequence[str], seconds: float) -> str:
    """The lines printed when a run ends."""
    return format_summary(summary_data(output_dir, labels, seconds))


__all__ = [
    "SUMMARY_JSON",
    "SUMMARY_TEXT",
    "format_summary",
    "run_summary",
    "summary_data",
    "window_means",
    "write_summary",
]
