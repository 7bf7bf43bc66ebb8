"""The values of ``metrics.jsonl`` computed from a run's results: rewards, lengths, memory, an
evaluation's summary renamed, and one step's metrics pooled over data-parallel ranks.
"""

from __future__ import annotations

import math
import resource
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rlvr.outputs.metrics import TIMING_KEYS


def peak_memory_mb() -> float:
    """CUDA peak allocated memory, or the process's peak RSS on CPU, in MiB.

    torch is looked up, not imported: CUDA memory is allocated only once torch is loaded, and
    reading a run's metrics (``rlvr plot``, :func:`rlvr.outputs.metrics.read_metrics`) must
    not load it."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB


def reward_metrics(total: Any, per_reward: Mapping[str, Any]) -> dict[str, float]:
    """``reward``, ``reward_std`` and ``rewards/<label>/{mean,std,none_count,timeouts,errors}``
    from :class:`rlvr.rewards.scoring.RewardStats` (population std; mean and std are NaN, logged as
    null, when a reward returned None for every sample)."""
    out: dict[str, float] = {"reward": total.mean, "reward_std": total.std}
    for label, s in per_reward.items():
        out[f"rewards/{label}/mean"] = s.mean
        out[f"rewards/{label}/std"] = s.std
        out[f"rewards/{label}/none_count"] = s.none_count
        out[f"rewards/{label}/timeouts"] = s.timeouts
        out[f"rewards/{label}/errors"] = s.errors
    return out


def length_metrics(lengths: Sequence[int], truncated: Sequence[bool]) -> dict[str, float]:
    n = max(len(lengths), 1)
    return {
        "completion_length/mean": sum(lengths) / n,
        "completion_length/min": float(min(lengths, default=0)),
        "completion_length/max": float(max(lengths, default=0)),
        "truncated_frac": sum(bool(t) for t in truncated) / n,
    }


def eval_metrics(summary: Mapping[str, Any]) -> dict[str, Any]:
    """An :class:`rlvr.evaluation.loop.Evaluation` summary as ``metrics.jsonl`` keys:
    ``eval/`` before each, ``reward`` named ``eval/reward_mean``; ``accuracy`` (equal to
    pass@1), the timing parts and the first failed episode's cause (text) are left out,
    ``eval/time`` is the whole evaluation."""
    renamed = {"reward": "reward_mean", "total_time": "time"}
    skip = {"accuracy", "generation_time", "scoring_time", "first_failure"}
    return {f"eval/{renamed.get(k, k)}": v for k, v in summary.items() if k not in skip}


#: Metrics that are counts: summed over ranks.
_SUMMED = ("groups_filtered", "groups_kept", "num_tokens", "prompt_tokens", "guide/count")
_SUMMED_SUFFIXES = ("/none_count", "/timeouts", "/errors")
#: Metrics the update already made global (equal on every rank): rank 0's value.
_GLOBAL = ("step", "loss", "grad_norm", "value_grad_norm", "learning_rate", "skipped")
_GLOBAL_PREFIXES = ("generation_rounds",)


def _std_mean_key(key: str) -> str | None:
    if key == "reward_std":
        return "reward"
    if key.endswith("/std"):
        return key[: -len("std")] + "mean"
    return None


def reduce_metrics(parts: Sequence[Mapping[str, Any]], weights: Sequence[float]) -> dict:
    """One step's metrics from every rank's: counts summed, ``*max``/``*min`` and timings
    max/min, stds pooled (population, from the matching means), the rest averaged with
    ``weights`` (each rank's number of completions); the update's values (loss, grad norm,
    ...) are already global."""
    keys = list(dict.fromkeys(k for p in parts for k in p))  # a rank may lack one (no batch)
    total = sum(weights) or 1.0
    out: dict[str, Any] = {}
    for key in keys:
        values = [p.get(key) for p in parts]
        first = (
            next(v for v in values if v is not None) if any(v is not None for v in values) else None
        )
        pairs = [
            (float(v), w)
            for v, w in zip(values, weights, strict=True)
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        ]
        nums = [v for v, _ in pairs]
        if key in _GLOBAL or key.startswith(_GLOBAL_PREFIXES) or not nums:
            out[key] = parts[0].get(key, first)
        elif key in _SUMMED or key.endswith(_SUMMED_SUFFIXES):
            out[key] = sum(nums)
        elif key in TIMING_KEYS or key.startswith("profile/") or key.endswith("max"):
            out[key] = max(nums)
        elif key.endswith("min"):
            out[key] = min(nums)
        elif key == "guide/reward_mean":  # a mean over each rank's guides
            counts = [float(p.get("guide/count") or 0) for p in parts]
            by_rank = zip(values, counts, strict=True)
            pooled = [(float(v), c) for v, c in by_rank if v is not None and c > 0]
            out[key] = sum(v * c for v, c in pooled) / sum(c for _, c in pooled)
        else:  # ranks without completions (weight 0) do not count
            weight = sum(w for _, w in pairs)
            out[key] = sum(v * w for v, w in pairs) / weight if weight > 0 else nums[0]
    for key in list(out):
        mean_key = _std_mean_key(key)
        if mean_key is None or mean_key not in out:
            continue
        try:
            mean = float(out[mean_key])
            var = sum(
                w * (float(p[key]) ** 2 + (float(p[mean_key]) - mean) ** 2)
                for p, w in zip(parts, weights, strict=True)
                if w > 0
            )
        except (TypeError, ValueError, KeyError):
            continue  # a null std/mean (no values) stays rank 0's
        out[key] = (var / total) ** 0.5
    return out


__all__ = ["eval_metrics", "length_metrics", "peak_memory_mb", "reduce_metrics", "reward_metrics"]
