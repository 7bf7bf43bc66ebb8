"""The collapse guard: notice when a run is destroying the policy, say so, and (as asked) stop.

RL on a small model can go wrong without any error: the policy drifts onto answers that are
always wrong, every group loses its spread, the gradient vanishes and the run goes on to its
last step, saving a model far worse than the one it started from. Each step the guard compares
the run with where it started (the mean of its first ``window`` steps, and the first in-training
eval) and trips on the first of:

- ``reward``: the mean training reward of the last ``window`` steps fell below ``(1 -
  reward_drop)`` of the first window's;
- ``eval``: an in-training eval's accuracy fell below ``(1 - eval_drop)`` of the first eval's;
- ``no_spread``: on every step of the last window at least ``no_spread`` of the groups had no
  spread (nothing left to learn from) while the reward was below the first window's;
- ``entropy``: the policy's mean entropy over the last window fell below ``(1 -
  entropy_drop)`` of the first window's while the reward was no higher than the first window's
  (the policy narrowing without gaining).

The signals that need the reward to be lower keep a run that is sharpening onto right answers
(lower entropy, groups all correct) from looking like one that collapses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Collapse:
    """What tripped the guard: the signal, the step, and a sentence with the numbers."""

    signal: str
    step: int
    message: str


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def _number(metrics: Mapping[str, Any], key: str) -> float:
    value = metrics.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)


class CollapseGuard:
    """Watches a run's step metrics and in-training evals (see the module docstring).

    ``settings`` is ``training.collapse`` (:class:`rlvr.config.schema.CollapseConfig`). The
    guard keeps the few numbers it compares (per step: reward, entropy, share of groups
    without spread) and saves them with the checkpoint, so a resumed run judges the same
    history."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.rewards: list[float] = []
        self.entropies: list[float] = []
        self.no_spread: list[float] = []
        self.first_eval: float | None = None
        self.tripped: Collapse | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.settings.action != "off")

    # ------------------------------------------------------------------ observations

    def observe_step(self, step: int, metrics: Mapping[str, Any]) -> Collapse | None:
        """Record a training step's metrics; the collapse it shows, the first time one does."""
        if not self.enabled:
            return None
        self.rewards.append(_number(metrics, "reward"))
        self.entropies.append(_number(metrics, "entropy"))
        self.no_spread.append(_number(metrics, "zero_std_frac"))
        return self._trip(self._check_steps(step))

    def observe_eval(self, step: int, accuracy: float | None) -> Collapse | None:
        """Record an in-training eval's accuracy (pass@1, else the mean reward)."""
        if not self.enabled or accuracy is None or not math.isfinite(accuracy):
            return None
        if self.first_eval is None:
            self.first_eval = accuracy
            return None
        s = self.settings
        if self.first_eval > 0 and accuracy < (1 - s.eval_drop) * self.first_eval:
            return self._trip(
                Collapse(
                    "eval",
                    step,
                    f"held-out accuracy fell from {self.first_eval:.3f} (first eval) to "
                    f"{accuracy:.3f} at step {step}",
                )
            )
        return None

    def _trip(self, found: Collapse | None) -> Collapse | None:
        if found is None or self.tripped is not None:
            return None
        self.tripped = found
        return found

    def _check_steps(self, step: int) -> Collapse | None:
        s, w = self.settings, self.settings.window
        if len(self.rewards) < 2 * w:  # a first window and a last one that do not overlap
            return None
        first_reward, last_reward = _mean(self.rewards[:w]), _mean(self.rewards[-w:])
        if not (math.isfinite(first_reward) and math.isfinite(last_reward)):
            return None
        span = f"steps {step - w + 1}-{step}"
        if first_reward > 0 and last_reward < (1 - s.reward_drop) * first_reward:
            return Collapse(
                "reward",
                step,
                f"the training reward fell from {first_reward:.3f} (mean of the first {w} "
                f"steps) to {last_reward:.3f} (mean of {span})",
            )
        lower = last_reward < first_reward
        spread = self.no_spread[-w:]
        if lower and all(math.isfinite(v) and v >= s.no_spread for v in spread):
            return Collapse(
                "no_spread",
                step,
                f"at least {s.no_spread:.0%} of the groups had no spread on every one of {span} "
                f"(nothing left to learn from) while the reward fell from {first_reward:.3f} to "
                f"{last_reward:.3f}",
            )
        first_h, last_h = _mean(self.entropies[:w]), _mean(self.entropies[-w:])
        if (
            math.isfinite(first_h)
            and math.isfinite(last_h)
            and first_h > 0
            and last_h < (1 - s.entropy_drop) * first_h
            and last_reward <= first_reward
        ):
            return Collapse(
                "entropy",
                step,
                f"the policy's entropy fell from {first_h:.4f} to {last_h:.4f} ({span}) while "
                f"the reward did not rise ({first_reward:.3f} -> {last_reward:.3f})",
            )
        return None

    def observe(self, step: int, m: Mapping[str, Any], accuracy: float | None) -> Collapse | None:
        """A step's metrics line and its eval's ``accuracy`` (None: no eval at this step); the
        collapse either of them shows, if any."""
        found = self.observe_step(step, m)
        if accuracy is not None:
            found = self.observe_eval(step, accuracy) or found
        return found

    # ------------------------------------------------------------------ checkpointed state

    def state_dict(self) -> dict[str, Any]:
        return {
            "rewards": list(self.rewards),
            "entropies": list(self.entropies),
            "no_spread": list(self.no_spread),
            "first_eval": self.first_eval,
            "tripped": asdict(self.tripped) if self.tripped is not None else None,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.rewards = [float(v) for v in state.get("rewards", [])]
        self.entropies = [float(v) for v in state.get("entropies", [])]
        self.no_spread = [float(v) for v in state.get("no_spread", [])]
        self.first_eval = state.get("first_eval")
        tripped = state.get("tripped")
        self.tripped = Collapse(**tripped) if tripped else None


def warning_text(found: Collapse, action: str) -> str:
    """The console's (and the summary's) line for a tripped guard."""
    then = (
        "stopping the run (training.collapse.action: stop)"
        if action == "stop"
        else "the run goes on (training.collapse.action: stop would end it here)"
    )
    return (
        f"collapse guard: the policy may be collapsing at step {found.step}: {found.message}; "
        f"{then}. Lower training.learning_rate (or the LoRA size), and keep the best checkpoint "
        "with training.keep_best and in-training eval (training.eval_steps)"
    )


__all__ = ["Collapse", "CollapseGuard", "warning_text"]
