"""What a run reports: ``metrics.jsonl``, ``samples.jsonl``, the progress bar, a compact line
every ``logging_steps``, TensorBoard and Weights & Biases; and :func:`step_metrics`, the one
place a step's metrics are assembled.

``metrics.jsonl`` has one flat JSON object per step, flushed as it is written. Its namespace has
three parts and no exceptions:

1. core metrics, measured by rlvr itself for every algorithm:

   - ``step``; ``reward`` / ``reward_std`` (weighted score over every completion generated in
     the step, all generation rounds; failed episodes have none and are left out, so a step
     whose every episode failed logs null; with ``training.guidance`` the sampled ones only,
     and ``guide/count`` / ``guide/reward_mean`` describe the guide completions);
   - ``zero_std_frac`` (groups whose completions all scored the same), ``groups_filtered``,
     ``groups_kept``, ``generation_rounds`` (dynamic sampling);
   - ``completion_length/{mean,min,max}`` (tokens), ``truncated_frac``, ``num_tokens``
     (completion tokens trained on), ``prompt_tokens`` (their prompts' tokens, a prompt
     counted once per completion);
   - ``loss``, ``entropy``, ``kl`` (k3 estimate of the KL to the reference model, only when
     there is one), ``grad_norm`` (before clipping; ``value_grad_norm`` with a value model),
     ``learning_rate``, ``inert_frac`` (the share of rows the update skipped because their
     loss has no gradient, e.g. GRPO groups of equal scores; ``entropy`` is measured on the
     rest, null when none is left), ``skipped`` (1 when a non-finite loss or gradient skipped
     the update; ``loss`` is then null), ``sampler/logp_gap_{mean,max}`` (backends that
     return sampler log-probs; absent on a step whose rows were all inert);
   - timing fields (:data:`TIMING_KEYS`): ``step_time``, ``generation_time``,
     ``scoring_time``, ``training_time``, ``cpu_time`` (CPU seconds of this process in the
     step, all threads: what other jobs on a shared machine disturb less than ``step_time``),
     ``tokens_per_second`` (completion tokens generated per second of the step),
     ``peak_memory_mb``; with ``training.profile_phases``, the CPU seconds of the step's
     phases: ``profile/generation`` (the rollout, rewards included), ``profile/no_grad`` (old
     and reference log-probabilities, old values), ``profile/forward`` (the update's passes and
     losses), ``profile/backward``, ``profile/optimizer`` (clipping and the optimizer step);

2. ``rewards/<label>/{mean,std,none_count,timeouts,errors}`` per configured reward (stds are
   population stds, as in ``rlvr rewards score``; a mean over no values is null), and
   ``rewards/<label>/metric/<name>``: the mean of what a TRL-style reward logged with
   ``log_metric(name, value)`` in the step (:func:`rlvr.rollout.runner.logged_metric`);
3. ``algo/<algorithm name>/<key>``: whatever the algorithm's ``prepare`` and ``loss`` report
   (``algo/grpo/clip_frac_low``, ``algo/ppo/value_loss``, ...).

Before 0.2 the algorithm's metrics were logged without the prefix (``approx_kl``,
``clip_frac_low``, ...; :data:`LEGACY_ALGO_KEYS`); ``rlvr plot`` still reads such runs.

4. ``eval/...`` on the lines of the steps that ran in-training evaluation
   (``training.eval_steps``; :func:`eval_metrics`), and on a line of its own at step 0 with
   ``eval_on_start``: ``eval/reward_mean``, ``eval/reward_std``, ``eval/rewards/<label>/...``,
   ``eval/pass@<j>``, ``eval/format_ok``, ``eval/completion_length/*``,
   ``eval/truncated_frac``, ``eval/time``.

On resume the files are cut back to the resumed step, so they read as one uninterrupted run
(``reward_errors.jsonl`` too, by :meth:`rlvr.rewards.failures.RewardErrorLog.resume`), and the
first line the resumed run logs says where it resumed: ``resumed_from`` (the checkpoint's step).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import resource
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from rlvr.api.errors import RlvrError

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
#: One line per failed episode of a multi-turn run (:class:`rlvr.rollout.episodes.EpisodeRunner`).
ENV_ERRORS_FILE = "env_errors.jsonl"

#: The key of the first line a resumed run logs: the step of the checkpoint it resumed from
#: (a new process: ``peak_memory_mb`` starts again from its own peak there; ``rlvr plot`` marks
#: it).
RESUMED_FROM = "resumed_from"

#: Fields that depend on the machine, the load and the run's history (where it was resumed),
#: not on the run's math (left out when runs are compared, e.g. resumed vs uninterrupted).
TIMING_KEYS = frozenset(
    {
        RESUMED_FROM,
        "step_time",
        "generation_time",
        "scoring_time",
        "training_time",
        "cpu_time",
        "tokens_per_second",
        "peak_memory_mb",
        "eval/time",
    }
)

#: Keys every line of metrics.jsonl has (besides the per-reward ones).
CORE_KEYS = (
    "step",
    "reward",
    "reward_std",
    "loss",
    "zero_std_frac",
    "groups_filtered",
    "generation_rounds",
    "completion_length/mean",
    "completion_length/min",
    "completion_length/max",
    "truncated_frac",
    "entropy",
    "grad_norm",
    "learning_rate",
    "inert_frac",
    "skipped",
    "step_time",
    "cpu_time",
    "num_tokens",
    "prompt_tokens",
    "tokens_per_second",
    "peak_memory_mb",
)

#: Algorithm metrics logged without the ``algo/<name>/`` prefix before 0.2 (read by ``rlvr plot``
#: for one more release).
LEGACY_ALGO_KEYS = (
    "approx_kl",
    "clip_frac",
    "clip_frac_low",
    "clip_frac_high",
    "algo/clip_frac",
)


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


def peak_memory_mb() -> float:
    """CUDA peak allocated memory, or the process's peak RSS on CPU, in MiB.

    torch is looked up, not imported: CUDA memory is allocated only once torch is loaded, and
    reading a run's metrics (``rlvr plot``, :func:`read_metrics`) must not load it."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB


# --------------------------------------------------------------------------- statistics


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
    """An :class:`rlvr.evaluation.evaluate.Evaluation` summary as ``metrics.jsonl`` keys:
    ``eval/`` before each, ``reward`` named ``eval/reward_mean``; ``accuracy`` (equal to
    pass@1) and the timing parts are left out, ``eval/time`` is the whole evaluation."""
    renamed = {"reward": "reward_mean", "total_time": "time"}
    skip = {"accuracy", "generation_time", "scoring_time"}
    return {f"eval/{renamed.get(k, k)}": v for k, v in summary.items() if k not in skip}


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


def read_metrics(output_dir: str | Path) -> list[dict[str, Any]]:
    """The lines of ``OUTPUT_DIR/metrics.jsonl``."""
    path = Path(output_dir) / METRICS_FILE
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


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


# --------------------------------------------------------------------------- data parallelism

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


__all__ = [
    "reduce_metrics",
    "CORE_KEYS",
    "ENV_ERRORS_FILE",
    "METRICS_FILE",
    "RESUMED_FROM",
    "SAMPLES_FILE",
    "TIMING_KEYS",
    "LEGACY_ALGO_KEYS",
    "MetricsLogger",
    "compact_line",
    "eval_metrics",
    "progress_figures",
    "third_figure",
    "length_metrics",
    "peak_memory_mb",
    "read_metrics",
    "reward_metrics",
]
