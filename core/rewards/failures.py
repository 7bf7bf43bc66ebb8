"""Reward failures made visible: what failed, why, on which row, and when to stop.

Rewards run isolated (:mod:`rlvr.rewards.pool`): a call that raises or times out yields its entry's
``fallback`` and training goes on. :class:`RewardErrorLog` makes sure that is never silent:

- the first occurrence of each distinct error of each reward (an exception raised at one place
  in the code, whatever its message; or a distinct message) is printed once, with its
  traceback, and written to ``OUTPUT_DIR/reward_errors.jsonl`` with the sample that caused it;
- every scoring round with errors or timeouts prints one line with the counts;
- a resumed run cuts the file back to its step (:meth:`RewardErrorLog.resume`), so it reads as
  one uninterrupted run's;
- a reward entry with ``on_error: raise`` stops the run at its first error, and any reward whose
  failed share of a round exceeds ``training.max_reward_error_frac`` stops it too
  (:class:`RewardError`; the trainer saves a checkpoint of the last finished step). The round
  stops as soon as that is certain, and a reward whose first calls of a round all time out is
  taken for stuck (:meth:`rlvr.rewards.pool.RewardPool.score`): a hanging judge stops a run in
  seconds, not ``timeout x calls / workers`` of silence per step.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlvr.api.errors import RlvrError
from rlvr.api.registration import Sample
from rlvr.rewards.scoring import ScoreEntry, Scores

ERRORS_FILE = "reward_errors.jsonl"


class RewardError(RlvrError, RuntimeError):
    """A reward failed more than the config allows (``on_error: raise``, or too many)."""


class RewardErrorLog:
    """Reports the failures in each :class:`~rlvr.rewards.scoring.Scores`; one per run."""

    def __init__(
        self,
        entries: Sequence[ScoreEntry],
        output_dir: str | Path | None,
        *,
        max_error_frac: float = 1.0,
        echo: Callable[[str], None] = print,
        file_name: str = ERRORS_FILE,
    ) -> None:
        self.entries = list(entries)
        self.path = Path(output_dir) / file_name if output_dir is not None else None
        self.max_error_frac = max_error_frac
        self.echo = echo
        self._seen: set[tuple[str, str]] = set()

    def report(self, scores: Scores, samples: Sequence[Sample], *, step: int | None = None) -> None:
        """Print and record what failed in ``scores``; raise :class:`RewardError` to stop."""
        where = f"step {step}: " if step is not None else ""
        for i, entry in enumerate(self.entries):
            label = entry.label
            failures = scores.failures.get(label, {})
            if not failures:
                continue
            sites = scores.sites.get(label, {})
            for index, message in sorted(failures.items()):
                site = sites.get(index)  # one per raise site, whatever the message says
                if (label, site or message) not in self._seen:
                    self._seen.add((label, site or message))
                    tb = scores.tracebacks.get(label, {}).get(site) if site else None
                    self._first(label, message, site, tb, samples[index], step)
            errors, timeouts = scores.errors.get(label, 0), scores.timeouts.get(label, 0)
            n = len(samples)
            file = f"; details in {self.path}" if self.path is not None else ""
            self.echo(
                f"{where}reward {label!r}: {errors} errors and {timeouts} timeouts in {n} calls "
                f"(those samples got the fallback {entry.fallback}){file}"
            )
            if entry.on_error == "raise" and errors:
                first = next(m for m in failures.values())
                raise RewardError(
                    f"reward {label!r} raised ({first}) and rewards[{i}].on_error is 'raise'; "
                    "fix the reward, or set on_error: fallback to score such calls with "
                    "the fallback"
                )
            if (errors + timeouts) / max(n, 1) > self.max_error_frac:
                stopped = " (scoring stopped there)" if scores.stopped is not None else ""
                raise RewardError(
                    f"reward {label!r} failed on {errors + timeouts} of {n} calls{stopped}, more "
                    f"than training.max_reward_error_frac={self.max_error_frac:g} (e.g. "
                    f"{next(iter(failures.values()))}); fix the reward (see {self.path}), or "
                    "raise training.max_reward_error_frac"
                )
        if scores.stopped is not None:  # a reward that hangs: stopped before its share did
            raise RewardError(
                f"{where}{scores.stopped}. Fix the reward (see {self.path}), raise its timeout, "
                "or set training.max_reward_error_frac: 1 to make every call whatever fails"
            )

    def resume(self, step: int) -> None:
        """Go on with a run resumed at ``step``: the file is cut back to that step (the steps
        after it run again, and record their errors again), and the errors it keeps count as
        seen (an uninterrupted run would not record them again). The file then reads as one
        uninterrupted run's, as ``metrics.jsonl`` does. Not a checkpointed piece: a run saved
        after a failed step has already reported that step's errors, which the file's cut
        forgets and a saved set would not."""
        if self.path is None or not self.path.is_file():
            return
        keep = []
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:  # a line cut short by a kill
                    continue
                if (record.get("step") or 0) <= step:
                    keep.append(line if line.endswith("\n") else line + "\n")
                    key = record.get("site") or record.get("error")
                    self._seen.add((str(record.get("reward")), str(key)))
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text("".join(keep), encoding="utf-8")
        os.replace(tmp, self.path)

    def _first(
        self,
        label: str,
        message: str,
        site: str | None,
        tb: str | None,
        sample: Sample,
        step: int | None,
    ) -> None:
        head = f"reward {label!r} failed: {message}"
        self.echo(f"{head}\n{tb.rstrip()}" if tb else head)
        if self.path is None:
            return
        record: dict[str, Any] = {
            "step": step,
            "reward": label,
            "error": message,
            "site": site,
            "traceback": tb,
            "prompt": sample.prompt,
            "completion": sample.completion,
            "row": dict(sample.row),
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")


__all__ = ["ERRORS_FILE", "RewardError", "RewardErrorLog"]
