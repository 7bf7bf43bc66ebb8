"""The console figures of a run's metrics: the progress bar's (:func:`progress_figures`) and the
compact line printed every ``logging_steps`` (:func:`compact_line`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def _shown(value: Any, spec: str) -> str:
    """``value`` formatted with ``spec`` for the console, whatever it is: a skipped step logs
    ``loss: null`` and a blown-up one ``"inf"``, and printing them must never stop a run."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "-" if value is None else str(value)
    return format(value, spec) if math.isfinite(value) else str(value)


def _clip_key(m: Mapping[str, Any]) -> str | None:
    """The algorithm's overall clip fraction (``algo/<name>/clip_frac``), if it logs one."""
    return next((k for k in m if k.startswith("algo/") and k.endswith("/clip_frac")), None)


def third_figure(m: Mapping[str, Any], before: str | None) -> str | None:
    """Which key the progress bar shows after the reward and the length: ``kl`` when the run
    has a reference model; else the clip fraction once it has left 0 (with one update per
    rollout it stays 0); else ``entropy``. Once the clip fraction is shown it stays."""
    if "kl" in m:
        return "kl"
    clip = _clip_key(m)
    if before is not None and before == clip:
        return before
    value = m.get(clip) if clip is not None else None
    if isinstance(value, int | float) and value > 0:
        return clip
    return "entropy" if "entropy" in m else None


def progress_figures(m: Mapping[str, Any], third: str | None) -> dict[str, str]:
    """The progress bar's figures: ones that move from step to step (the reward, the
    completion length, and ``third``: the KL, the clip fraction or the entropy), where GRPO's
    loss is about 0 by construction (its advantages have mean 0 in each group)."""
    out = {}
    for key, name, fmt in (
        ("reward", "reward", ".3f"),
        ("completion_length/mean", "len", ".0f"),
        (third, "clip" if third is not None and third.endswith("clip_frac") else third, ".3g"),
    ):
        value = m.get(key) if key is not None else None
        if name is not None and isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = _shown(value, fmt)
    return out


def compact_line(m: Mapping[str, Any], max_steps: int) -> str:
    """``step 12/100 | reward 0.412 ± 0.31 | answer 0.250 format 0.920 | loss 0.0123 | len 87
    | kl 0.0011 | 3.2 s/step`` (the per-reward means follow the weighted total; the last figure
    is the step's wall time)."""

    def num(key: str, fmt: str) -> str | None:
        v = m.get(key)
        return None if v is None or isinstance(v, str) else _shown(v, fmt)

    parts = [f"step {m['step']}/{max_steps}"]
    if (r := num("reward", ".3f")) is not None:
        parts.append(f"reward {r} ± {_shown(m.get('reward_std'), '.2f')}")
    for key, label, fmt in (
        ("loss", "loss", ".4g"),
        ("completion_length/mean", "len", ".0f"),
        ("kl", "kl", ".3g"),
        ("entropy", "entropy", ".3f"),
        ("grad_norm", "grad", ".3g"),
        ("learning_rate", "lr", ".2e"),
        ("step_time", "", ".1f"),
    ):
        if (v := num(key, fmt)) is not None:
            parts.append(f"{label} {v}".strip() + (" s/step" if key == "step_time" else ""))
    means = [
        f"{k.removeprefix('rewards/').removesuffix('/mean')} {_shown(v, '.3f')}"
        for k, v in m.items()
        if k.startswith("rewards/") and k.endswith("/mean") and isinstance(v, int | float)
    ]
    if means:
        parts.insert(2 if len(parts) > 1 and parts[1].startswith("reward ") else 1, " ".join(means))
    if m.get("skipped"):
        parts.append("SKIPPED (non-finite)")
    if (reward := num("eval/reward_mean", ".3f")) is not None:
        p1, format_ok = num("eval/pass@1", ".3f"), num("eval/format_ok", ".3f")
        parts.append(
            "eval"
            + (f" pass@1 {p1}" if p1 is not None else "")
            + (f" format_ok {format_ok}" if format_ok is not None else "")
            + f" reward {reward}"
        )
    return " | ".join(parts)


__all__ = ["compact_line", "progress_figures", "third_figure"]
