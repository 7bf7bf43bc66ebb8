"""The in-training eval's policies, which the loop asks after a step: when the eval runs
(:class:`EvalSchedule`), whether its failed episodes stop the run (:func:`failed_eval`) and
whether its result is the best so far, whose checkpoint ``training.keep_best`` keeps
(:class:`KeepBest`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.outputs import checkpoint as ckpt
from rlvr.rollout.runner import failed_episodes_error


@dataclass(frozen=True)
class EvalSchedule:
    """Every ``every`` steps and at the last one (``max_steps``); at step 0 too with
    ``on_start``. ``every=None``: no in-training eval."""

    every: int | None
    max_steps: int
    on_start: bool = False

    def should_evaluate(self, step: int) -> bool:
        if self.every is None:
            return False
        if step == 0:
            return self.on_start
        return step % self.every == 0 or step == self.max_steps

    def at_early_stop(self, step: int) -> bool:
        """A run its time budget stops at ``step`` ends with the eval its last step would have
        had: True when an eval is configured and ``step`` has not just had its own."""
        return self.every is not None and not self.should_evaluate(step)


def eval_accuracy(m: dict[str, Any]) -> float | None:
    """An in-training eval's accuracy on a metrics line: pass@1, else the mean reward."""
    for key in ("eval/pass@1", "eval/reward_mean"):
        value = m.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def failed_eval(
    summary: Mapping[str, Any], limit: float, step: int, environment: str
) -> str | None:
    """The error that stops a run whose eval at ``step`` had more failed episodes than
    ``training.max_failed_episode_frac`` allows, as a step's would (its figures would describe
    the environment's failures, not the model); None otherwise."""
    failed, episodes = summary.get("env/failed") or 0, summary.get("env/episodes") or 0
    if not episodes or failed / episodes <= limit:
        return None
    first = summary.get("first_failure")
    what = f"the eval at step {step}"
    return failed_episodes_error(what, failed, episodes, limit, environment, first)


class KeepBest:
    """``training.keep_best``: the best in-training eval so far, whose checkpoint is kept
    (:func:`rlvr.outputs.checkpoint.record_best` records it in the output directory)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.best: float | None = None

    def improved(self, m: dict[str, Any]) -> float | None:
        """The accuracy of ``m``'s eval when it beats the best so far (it becomes the best);
        else None."""
        accuracy = eval_accuracy(m)
        if not self.enabled or accuracy is None:
            return None
        if self.best is not None and accuracy <= self.best:
            return None
        self.best = accuracy
        return accuracy

    def record(self, output_dir: Path, step: int, m: dict[str, Any], accuracy: float) -> None:
        metric = "pass@1" if "eval/pass@1" in m else "reward_mean"
        ckpt.record_best(output_dir, step, metric, accuracy)

    def resumed(self, output_dir: Path, step: int) -> None:
        """A run resumed at ``step`` knows the best it kept up to there."""
        best = ckpt.best_checkpoint(output_dir)
        if best is not None and int(best["step"]) <= step:
            self.best = float(best["value"])


__all__ = ["EvalSchedule", "KeepBest", "eval_accuracy", "failed_eval"]
