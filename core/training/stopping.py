"""When a run stops: its planned steps (:func:`planned_steps`), and how it stops early without
losing work: the stop signals and the time budget.

- :class:`StopFlag`: the first SIGINT/SIGTERM asks the loop to finish its step, save and
  return; a second SIGINT aborts at once.
- :class:`Discarded`: a step whose reward calls failed once a stop was asked for is not trained
  on (the signal reached the rewards' own processes too); nor is one whose scoring was
  abandoned because it went on too long after the stop request
  (:class:`~rlvr.rewards.pool.ScoringAbandoned`).
- :class:`TimeBudget`: ``training.max_minutes``, stopping before a step (and the eval that ends a
  run) would end past it.
- :class:`BadSteps`: ``training.max_bad_steps``, non-finite steps in a row.
- :class:`StopReasons`: what the loop weighs after each step.
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.api.errors import TrainingError

logger = logging.getLogger("rlvr.training.trainer")


def planned_steps(training: Any, rows: int, world_size: int) -> int:
    """The steps a run plans: ``training.max_steps``, else ``num_train_epochs`` over ``rows``
    prompts at ``per_device_train_batch_size x gradient_accumulation_steps x world_size`` a
    step (at least 1)."""
    if training.max_steps > 0:
        return int(training.max_steps)
    per_step = (
        training.per_device_train_batch_size * training.gradient_accumulation_steps * world_size
    )
    return max(1, math.ceil(training.num_train_epochs * rows / per_step))


#: The wall clock ``max_minutes`` reads (a module attribute, so a test can make steps "long").
_clock = time.monotonic


class StopFlag:
    """First SIGINT/SIGTERM: finish the step, save, stop. Second SIGINT: abort at once."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopFlag:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested and signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            raise KeyboardInterrupt
        self.requested = True
        logger.warning(
            "stop requested: finishing this step, then saving a checkpoint "
            "(Ctrl-C again stops at once; the step in progress is then lost)"
        )

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class Discarded(Exception):
    """A step whose reward calls failed after a stop was requested: the shutdown may have
    caused those failures (a signal to the process group reaches a reward's own processes),
    so the step is not trained on; the run stops at the step before it."""


def close_all(parts: list[Any]) -> None:
    """Close a run's parts, the last built first (the list empties). A Ctrl-C while one closes
    (a second one right after a stop) still closes the rest, then is raised: a part left
    open (reward workers, vLLM servers) would keep the process from exiting. Any other error
    is a warning: closing must not hide the error that ended the run."""
    interrupted: KeyboardInterrupt | None = None
    while parts:
        part = parts.pop()
        try:
            part.close()
        except KeyboardInterrupt as exc:
            interrupted = exc
        except Exception as exc:
            logger.warning("closing %s failed: %s", type(part).__name__, exc)
    if interrupted is not None:
        raise interrupted


def discarded(at: int, step: int, why: BaseException, saved: bool, output_dir: Path) -> str:
    """What a run stopped at step ``at`` says when it discarded step ``step`` (the step before
    it ``saved`` where it could)."""
    where = f"checkpoint in {output_dir}" if saved else "nothing saved"
    return (
        f"stopped at step {at} ({where}); step {step} discarded: {why}; it runs again on --resume"
    )


class TimeBudget:
    """``training.max_minutes``, counted from the run's start (model loading included).

    The loop stops before a step that would end past the budget, keeping room for the eval
    that ends a run: the longest step (evals excluded) and the longest eval so far are the
    estimates."""

    def __init__(self, max_minutes: float | None) -> None:
        self.max_minutes = max_minutes
        self.started = _clock()
        self.longest_step = 0.0  # seconds, evals excluded
        self.longest_eval = 0.0  # seconds
        self.eval_seconds = 0.0  # all evals so far
        self._step: tuple[float, float] = (self.started, 0.0)

    def step_began(self) -> None:
        self._step = (_clock(), self.eval_seconds)

    def step_ended(self) -> None:
        began, evals_before = self._step
        took = _clock() - began - (self.eval_seconds - evals_before)
        self.longest_step = max(self.longest_step, took)

    def now(self) -> float:
        return _clock()

    def eval_took(self, seconds: float) -> None:
        self.eval_seconds += seconds
        self.longest_eval = max(self.longest_eval, seconds)

    def minutes(self) -> float:
        return (_clock() - self.started) / 60

    def state_dict(self) -> dict[str, float]:
        """The estimates, not the clock: a resumed run gets a fresh budget (``max_minutes`` is
        per process) but judges its first step by the longest step and eval already seen."""
        return {"longest_step": self.longest_step, "longest_eval": self.longest_eval}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.longest_step = float(state.get("longest_step", 0.0))
        self.longest_eval = float(state.get("longest_eval", 0.0))

    def out_of_time(self) -> bool:
        """Would one more step, and the eval that ends a run, end past ``max_minutes``?"""
        needed = self.longest_step + self.longest_eval
        return self.max_minutes is not None and self.minutes() + needed / 60 > self.max_minutes

    def used(self) -> str:
        """Why a run stopped on its time budget, for the stop message."""
        evals = f", an eval {self.longest_eval / 60:.1f} min" if self.longest_eval else ""
        return (
            f"training.max_minutes={self.max_minutes:g}: {self.minutes():.1f} min used, "
            f"a step takes up to {self.longest_step / 60:.1f} min{evals}"
        )


class BadSteps:
    """``training.max_bad_steps``: the steps in a row whose update was skipped for a non-finite
    loss or gradient norm; that many save a checkpoint and stop the run."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.count = 0

    def observe(self, step: int, skipped: bool) -> None:
        if not skipped:
            self.count = 0
            return
        self.count += 1
        logger.warning(
            "step %d: non-finite loss or gradient norm; update skipped (%d in a row, "
            "training.max_bad_steps=%d)",
            step,
            self.count,
            self.limit,
        )

    def too_many(self) -> bool:
        return self.count >= self.limit

    def error(self, step: int, saved: Path) -> TrainingError:
        """The error that stops the run, once :meth:`too_many` (``saved``: its checkpoint)."""
        return TrainingError(
            f"{self.count} steps in a row had a non-finite loss or gradient norm "
            f"(training.max_bad_steps={self.limit}); stopped at step {step} and saved {saved} "
            "(its weights are from the last good update). Lower training.learning_rate, check "
            "the rewards for huge values, or use training.max_grad_norm"
        )


@dataclass(frozen=True)
class StopReasons:
    """What may end a run early after a step: a stop signal (``requested``), the collapse
    guard (``collapsed``, with ``training.collapse.action: stop``), a callback (``asked``, its
    reason), the time budget (``out_of_time``). The stop message names the first that holds,
    in that order."""

    requested: bool = False
    collapsed: bool = False
    asked: str | None = None
    out_of_time: bool = False

    def any(self) -> bool:
        return self.requested or self.collapsed or bool(self.asked) or self.out_of_time

    def first(self) -> str | None:
        """``"requested"``, ``"collapsed"``, ``"asked"`` or ``"out_of_time"``; None when none
        holds here (another rank stopped the run)."""
        for name in ("requested", "collapsed", "asked", "out_of_time"):
            if getattr(self, name):
                return name
        return None

    def why(self, budget: TimeBudget) -> str:
        """What the stop message says in brackets of the first reason (empty for a stop
        request); on time, the budget's account (:meth:`TimeBudget.used`)."""
        first = self.first()
        if first == "collapsed":
            return " (training.collapse.action: stop)"
        if first == "asked":
            return f" (a callback asked: {self.asked})"
        return f" ({budget.used()})" if first == "out_of_time" else ""


__all__ = [
    "BadSteps",
    "Discarded",
    "StopFlag",
    "StopReasons",
    "TimeBudget",
    "close_all",
    "discarded",
]
