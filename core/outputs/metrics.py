"""The namespace of ``metrics.jsonl``: the run files' names, the keys, and reading them back
(:func:`read_metrics`). A step's metrics are assembled by
:func:`rlvr.training.step_metrics.step_metrics` from the values of
:mod:`rlvr.outputs.metrics_compute`, written by :class:`rlvr.outputs.metrics_logger.MetricsLogger`
and shown on the console by :mod:`rlvr.outputs.metrics_console`.

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
     ``scoring_time``, ``training_time``, ``weight_sync_time`` (the part of ``training_time``
     the generator took to take the updated weights), ``cpu_time`` (CPU seconds of this
     process in the step, all threads: what other jobs on a shared machine disturb less than
     ``step_time``), ``tokens_per_second`` (completion tokens generated per second of the step),
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
   (``training.eval_steps``; :func:`~rlvr.outputs.metrics_compute.eval_metrics`), and on a
   line of its own at step 0 with ``eval_on_start``: ``eval/reward_mean``, ``eval/reward_std``,
   ``eval/rewards/<label>/...``, ``eval/pass@<j>``, ``eval/format_ok``,
   ``eval/completion_length/*``, ``eval/truncated_frac``, ``eval/time``.

On resume the files are cut back to the resumed step, so they read as one uninterrupted run
(``reward_errors.jsonl`` too, by :meth:`rlvr.rewards.failures.RewardErrorLog.resume`), and the
first line the resumed run logs says where it resumed: ``resumed_from`` (the checkpoint's step).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
        "wait/trainer",
        "wait/generator",
        "weight_sync_time",
        "server/queue_time",
        "prefix_cache/hit_frac",  # a resumed run starts with an empty cache
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


def read_metrics(output_dir: str | Path) -> list[dict[str, Any]]:
    """The lines of ``OUTPUT_DIR/metrics.jsonl``."""
    path = Path(output_dir) / METRICS_FILE
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


__all__ = [
    "CORE_KEYS",
    "ENV_ERRORS_FILE",
    "LEGACY_ALGO_KEYS",
    "METRICS_FILE",
    "RESUMED_FROM",
    "SAMPLES_FILE",
    "TIMING_KEYS",
    "read_metrics",
]
