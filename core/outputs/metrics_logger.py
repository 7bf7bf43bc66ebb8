"""The run's metric sinks: :class:`MetricsLogger` appends each step's metrics to
``metrics.jsonl`` (and samples to ``samples.jsonl``), drives the progress bar and prints the
compact line; on resume it cuts the files back to the resumed step.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from rlvr.api.errors import RlvrError
from rlvr.outputs.metrics import ENV_ERRORS_FILE, METRICS_FILE, RESUMED_FROM, SAMPLES_FILE
from rlvr.outputs.metrics_console import compact_line, progress_figures, third_figure


class OutputWriteError(RlvrError, OSError):
    """``metrics.jsonl`` or ``samples.jsonl`` cannot be written (a full disk, a quota)."""


def _append(f: Any, text: str) -> None:
    """Write ``text`` to the open run file ``f`` and flush it; a failure (a full disk, a
    quota, a file size limit) is one message that says which file and what to do."""
    try:
        f.write(text)
        f.flush()
    except OSError as exc:
        code = errno.errorcode.get(exc.errno or 0)
        why = f"{exc.strerror or exc} ({code})" if code else str(exc)
        raise OutputWriteError(
            f"cannot write {Path(f.name).name} in {Path(f.name).parent}: {why}; the run stops "
            "here. Free some space, then --resume continues from the last checkpoint"
        ) from None


def _clean(value: Any) -> Any:
    """A JSON-able scalar: tensors to numbers, non-finite floats to None-safe strings."""
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


# --------------------------------------------------------------------------- files


def _cut(path: Path, step: int) -> None:
    """Keep only the lines of ``path`` with ``"step" <= step`` (written atomically)."""
    if not path.is_file():
        return
    keep = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                if json.loads(line).get("step", 0) <= step:
                    keep.append(line if line.endswith("\n") else line + "\n")
            except json.JSONDecodeError:  # a line cut short by a kill
                continue
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(keep), encoding="utf-8")
    os.replace(tmp, path)


class MetricsLogger:
    """Writes the run's metrics and samples; one per run.

    ``start_step`` > 0 means a resumed run: the files are cut back to that step first,
    TensorBoard events after it are purged, and the first line logged gets
    ``resumed_from: start_step``.
    """

    def __init__(
        self,
        output_dir: str | Path,
        *,
        max_steps: int,
        start_step: int = 0,
        logging_steps: int = 1,
        progress: bool = True,
    ) -> None:
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.logging_steps = logging_steps
        self.max_steps = max_steps
        self._resumed_from = start_step if start_step > 0 else None  # until the first line
        _cut(self.dir / METRICS_FILE, start_step)
        _cut(self.dir / SAMPLES_FILE, start_step)
        _cut(self.dir / ENV_ERRORS_FILE, start_step)
        self._metrics = open(self.dir / METRICS_FILE, "a", encoding="utf-8")  # noqa: SIM115
        self._samples: Any = None
        self._bar: Any = None
        self._third: str | None = None  # the progress bar's third figure (third_figure)
        if progress:
            # disable=None: no bar where stderr is no terminal (a log file, CI), whose every
            # redraw would be another line; the step lines below are printed either way.
            self._bar = tqdm(
                total=max_steps,
                initial=start_step,
                desc="rlvr",
                unit="step",
                dynamic_ncols=True,
                disable=None,
            )

    def log(self, metrics: Mapping[str, Any]) -> None:
        """Write one step's metrics (must contain ``step``) everywhere."""
        step = int(metrics["step"])
        line = {k: _clean(v) for k, v in metrics.items()}
        if self._resumed_from is not None:
            line[RESUMED_FROM], self._resumed_from = self._resumed_from, None
        _append(self._metrics, json.dumps(line) + "\n")
        if self._bar is not None and "reward" in line:  # a training step (not eval-only)
            self._bar.update(step - self._bar.n)
            self._third = third_figure(line, self._third)
            self._bar.set_postfix(progress_figures(line, self._third))
        if step % self.logging_steps == 0 or step == self.max_steps or "eval/reward_mean" in line:
            self.write(compact_line(line, self.max_steps))

    def log_samples(self, step: int, samples: Iterable[Mapping[str, Any]]) -> None:
        """Append sample completions (with rewards) of ``step`` to ``samples.jsonl``."""
        if self._samples is None:
            self._samples = open(self.dir / SAMPLES_FILE, "a", encoding="utf-8")  # noqa: SIM115
        lines = [
            json.dumps({"step": step, **sample}, default=str, ensure_ascii=False) + "\n"
            for sample in samples
        ]
        _append(self._samples, "".join(lines))

    def write(self, message: str) -> None:
        """A line of text that does not break the progress bar."""
        if self._bar is not None:
            self._bar.write(message)
        else:
            print(message, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        for f in (self._metrics, self._samples):
            if f is not None and not f.closed:
                # What a failed write left in the buffer fails again here: already reported.
                with contextlib.suppress(OSError):
                    f.close()

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["MetricsLogger", "OutputWriteError"]
