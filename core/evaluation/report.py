"""What ``rlvr eval`` prints of an evaluation's summary: one headline, the full report, and the
error it ends with when every episode failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlvr.evaluation.correctness import NO_CORRECTNESS


def headline(summary: Mapping[str, Any]) -> str:
    """One line for people: accuracy (pass@1) by the named reward, or that no reward checks
    answers; format compliance in percent; the mean reward."""
    metric = summary.get("metric")
    if metric is not None:
        threshold = summary.get("threshold")
        parts = [
            f"accuracy {100 * (summary.get('accuracy') or 0):.1f}% (pass@1: reward "
            f"{metric!r} >= {threshold:g}, {summary.get('metric_rule', 'chosen')})"
        ]
    else:
        parts = [f"no accuracy: {summary.get('metric_rule', NO_CORRECTNESS)}"]
    if summary.get("format_ok") is not None:
        parts.append(f"format compliance {100 * summary['format_ok']:.1f}%")
    if summary.get("reward") is not None:
        parts.append(f"reward {summary['reward']:.3f}")
    failed, episodes = summary.get("env/failed"), summary.get("env/episodes")
    if isinstance(failed, int | float) and failed > 0:
        parts.append(f"{failed:.0f} of {episodes:.0f} episodes failed (counted not correct)")
    parts.append(f"{summary.get('num_prompts')} prompts x {summary.get('k')}")
    return " | ".join(parts)


def all_failed(summary: Mapping[str, Any]) -> str | None:
    """The error ``rlvr eval`` ends with when every episode failed (nothing was evaluated:
    its accuracy and rewards describe the environment's failures, not the model); None
    otherwise."""
    failed, episodes = summary.get("env/failed"), summary.get("env/episodes")
    if not isinstance(episodes, int | float) or not episodes or failed != episodes:
        return None
    first = summary.get("first_failure")
    return (
        f"every one of the {episodes:.0f} episodes failed, so nothing was evaluated"
        + (f" (the first: {first})" if first else "")
        + "; fix the environment (each episode's cause is in the samples file; `rlvr env "
        "check CONFIG` runs a few episodes alone), or raise environment.turn_timeout/"
        "episode_timeout if its calls are only slow"
    )


def report(summary: Mapping[str, Any]) -> str:
    """What ``rlvr eval`` prints: :func:`headline`, then pass@k, the per-reward means,
    completion lengths, the episodes (multi-turn environments), what was evaluated, and where
    the files are (``--json``: all of it)."""
    lines = [headline(summary)]
    passes = sorted(
        (int(k.removeprefix("pass@")), v) for k, v in summary.items() if k.startswith("pass@")
    )
    if passes:
        lines.append("  ".join(f"pass@{j} {v:.3f}" for j, v in passes if v is not None))
    means = [
        f"{k.removeprefix('rewards/').removesuffix('/mean')} {v:.3f}"
        for k, v in summary.items()
        if k.startswith("rewards/") and k.endswith("/mean") and isinstance(v, int | float)
    ]
    if means:
        lines.append("reward means: " + "  ".join(means))
    length, cut = summary.get("completion_length/mean"), summary.get("truncated_frac")
    if isinstance(length, int | float):
        clipped = f", {100 * cut:.1f}% cut at max_completion_length" if cut is not None else ""
        lines.append(f"completions: {length:.1f} tokens on average{clipped}")
    episodes = summary.get("env/episodes")
    if isinstance(episodes, int | float):
        lines.append(
            f"episodes: {episodes:.0f}, {summary.get('env/turns_mean', 0):.2f} turns and "
            f"{summary.get('env/tool_calls_mean', 0):.2f} tool calls on average, "
            f"{100 * summary.get('env/truncated_frac', 0):.1f}% truncated, "
            f"{summary.get('env/failed', 0):.0f} failed (not scored)"
        )
    split = summary.get("data")
    took = summary.get("total_time")
    lines.append(
        f"model {summary.get('model')} on {split}: {summary.get('num_samples')} samples, "
        f"temperature {summary.get('temperature')}"
        + (f", {took:.1f} s" if isinstance(took, int | float) else "")
    )
    lines.append(f"samples: {summary.get('samples')}  summary: {summary.get('summary')}")
    if summary.get("reward_errors"):
        lines.append(f"reward errors: {summary['reward_errors']}")
    return "\n".join(lines)


__all__ = ["all_failed", "headline", "report"]
