"""Evaluate a policy on held-out prompts: sample ``k`` completions per prompt, score them with
the configured rewards, report mean rewards and pass@k.

:func:`evaluate` reuses the training pieces: :func:`rlvr.model.loading.load_policy` for the model,
:func:`rlvr.data.prompts.load_rows` and :class:`rlvr.data.prompts.PromptSet` for the prompts (same
system
prompt, chat template and ``max_prompt_length`` as training), the configured backend's
generator, and :class:`rlvr.rewards.scoring.Scorer` for the rewards. Decisions, all explicit:

- **Model**: ``checkpoint`` when given: a checkpoint directory the trainer saved (anything
  ``from_pretrained`` loads), a LoRA adapter checkpoint (``adapter_config.json``: loaded on the
  config's ``model``, merged, then handed to the backend as a plain model), a run's
  ``output_dir`` (its latest complete checkpoint is used), or a ``.gguf`` file; otherwise
  ``model`` from the config. A checkpoint with a manifest is verified first (a damaged one is
  an :class:`EvalError` naming the file).
- **Data**: ``data.eval_path`` (default ``data.path``) with split ``split`` (default
  ``data.eval_split``; when that is null, ``data.split``). A directory of files or a hub
  dataset has splits (a directory with ``train.jsonl`` and ``test.jsonl`` has ``train`` and
  ``test``). A single local file has none: it is used whole, and a ``split`` that is itself a
  path to a ``.json``/``.jsonl``/``.parquet`` file *is* the eval data
  (``rlvr eval run.yaml --split data/test.jsonl``). Asking a single file for a named split is
  an error; evaluating the training file because nothing else is configured only warns.
  With ``data.reasoning_gym`` the eval data is the task's held-out split ``test``
  (:mod:`rlvr.data.reasoning_gym`), disjoint from its training rows by construction; with
  another ``data.source`` (but ``file``) that source's split ``split``.
  ``data.max_samples`` (a training setting) is ignored; ``limit`` keeps the first N prompts.
- **Sampling**: the ``training`` section's temperature, top-p/top-k/min-p, repetition penalty
  and ``max_completion_length``, for every ``k`` (``k=1`` included), so pass@1 is the expected
  success of one sample at the training temperature. For greedy decoding, set
  ``training.temperature=0`` (``rlvr eval --greedy`` does; then ``k > 1`` repeats the same
  completion and only warns).
  Seeds derive from ``training.seed``.
- **Correctness** (for accuracy and pass@k), :func:`correctness`, first that applies: the
  reward labelled ``metric`` (``rlvr eval --metric``); the rewards[] entry marked
  ``correctness: true``; the first reward whose plugin registers as checking answers
  (``correctness=True``: the built-in ``answer`` and ``numbers``); the first ``callable``
  reward (or function given to ``rlvr.Trainer``) whose label or function name says accuracy
  or correct(ness) and neither format nor length (TRL's ``accuracy_reward``, the GSM8K
  recipes' ``correctness_reward_func``). A format or length reward is never picked unless
  named. With none, no accuracy or pass@k is
  reported, only the mean rewards, and the console says so. A completion is correct when that
  reward's raw value (not the weighted one) is ``>= threshold`` (default: the reward's
  ``correct`` param when it has one, as ``answer`` and ``numbers`` do, else 1.0); None (not
  applicable) counts as not correct. The console and the summary name the reward and why it
  was chosen (``metric``, ``metric_rule``).
- **Format compliance** (``format_ok``, only with a ``format`` reward): the fraction of
  completions for which every reward whose plugin is ``format`` scores at least its declared
  ``correct`` (the built-in ``format``: the score of a full match),
  :func:`~rlvr.evaluation.correctness.format_checks`.
- **pass@k**: the unbiased estimator of Chen et al. (2021), :func:`rlvr.functional.pass_at_k`,
  with ``n = k`` samples per prompt, averaged over prompts; ``pass@j`` is also reported for
  every power of two ``j < k`` (more useful than pass@k alone when ``k`` is large).
- **In training**: the trainer evaluates with the same :class:`Evaluation` every
  ``training.eval_steps`` (``eval_sampling: greedy`` sets temperature 0 for it).
- **Multi-turn environments** (an ``environment:`` whose episodes have turns): each sample is
  an episode, run by the same :class:`rlvr.rollout.episodes.EpisodeRunner` as in training
  (same limits and tool-call parsing, the sampling above for every turn), and the rewards
  score its final assistant message, plus the named rewards the environment returned, as in
  training. An episode the environment failed (raised, timed out) is not scored: its record
  says why (``failed``), it counts as not correct (a user would have got no answer) and is
  left out of the mean rewards. The summary adds the episodes' ``env/...`` figures (turns,
  tool calls, truncated and failed episodes; :mod:`rlvr.rollout.episodes`), the samples their
  ``transcript``.
- **Output**: ``output`` is the samples JSONL (one line per completion); the summary JSON is
  written beside it as ``<stem>.summary.json``. When ``output`` is a directory (or has no
  suffix) the files are ``samples.jsonl`` and ``summary.json`` inside it (existing files
  there are replaced, with a warning). Default: a directory of its own named by what was
  evaluated, ``training.output_dir/eval/base`` for the config's model and
  ``training.output_dir/eval/checkpoint-40`` for a checkpoint (a ``.gguf`` file: its stem);
  one that already holds an evaluation is kept, and the new one goes to ``base-2``,
  ``base-3``, ... The console and the summary say where the files went.
- **Reward failures** are reported as in training (:mod:`rlvr.rewards.failures`): each distinct
  error printed once with its traceback and recorded, with its prompt, completion and row, in
  ``reward_errors.jsonl`` beside the samples (``<stem>.reward_errors.jsonl`` for a file
  ``output``); the failed calls get their fallback and the eval goes on. In training the
  run's own log (and its ``max_reward_error_frac``) is used.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

from transformers import set_seed

from rlvr.api.host import build_generator
from rlvr.api.runtime import RunInfo
from rlvr.config.schema import DEFAULT_BACKEND, multi_turn
from rlvr.data.prompts import PromptSet
from rlvr.evaluation.correctness import correctness
from rlvr.evaluation.errors import EvalError
from rlvr.evaluation.loop import Evaluation
from rlvr.evaluation.paths import (
    eval_prompt_rows,
    output_paths,
    resolve_checkpoint,
    reward_errors_path,
)
from rlvr.model import lora
from rlvr.model.loading import (
    busy_cpu_warning,
    eos_token_ids,
    load_policy,
    resolve_device_dtype,
)
from rlvr.parallel import distributed
from rlvr.rewards.failures import RewardErrorLog
from rlvr.rewards.scoring import Scorer, score_entries

logger = logging.getLogger("rlvr.evaluation.evaluate")


def evaluate(
    config: Any,
    host: Any,
    *,
    checkpoint: str | Path | None = None,
    split: str | None = None,
    k: int = 1,
    limit: int | None = None,
    output: str | Path | None = None,
    metric: str | None = None,
    threshold: float | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Sample ``k`` completions for each eval prompt, score them, write the samples and a
    summary, and return the summary (see the module docstring for every choice made).

    ``config`` is a validated run config with ``model``, ``data`` and ``rewards`` (``backend``
    defaults to ``hf``). The summary holds ``pass@1``, ``pass@<j>`` (``j`` in
    :func:`~rlvr.evaluation.loop.pass_at_ks`), ``accuracy`` (fraction of correct completions,
    equal to pass@1), ``format_ok`` (fraction of format-compliant completions,
    :func:`~rlvr.evaluation.correctness.format_checks`; only with a ``format`` reward),
    ``reward``/``reward_std`` and
    ``rewards/<label>/{mean,std,none_count,timeouts,errors}`` (named as in ``metrics.jsonl``),
    ``completion_length/*``, ``truncated_frac``, and what was evaluated (model, data, split, k,
    metric, threshold, sampling, file paths).
    """
    if k < 1:
        raise EvalError(f"k must be >= 1 (got {k})")
    t = config.training
    correctness(config, metric, threshold, host)  # a bad metric fails before anything loads
    backend_name, backend_params, backend = _backend(config, host)
    model_path = resolve_checkpoint(checkpoint) if checkpoint is not None else None
    rows, data_cfg, split_name, data_desc = eval_prompt_rows(config, host, split, limit)
    samples_path, summary_path = output_paths(config, output, model_path)
    errors_path = reward_errors_path(samples_path, summary_path)
    if t.temperature == 0 and k > 1:
        logger.warning("training.temperature is 0 (greedy): all %d samples per prompt match", k)

    start = time.perf_counter()
    # Under torchrun each rank samples its share of every call's prompts
    # (rlvr.parallel.distributed).
    with distributed.data_parallel() as dist:
        entries = score_entries(config, host)
        scorer = Scorer(entries, workers=t.reward_workers)  # start now
        if dist.is_main:  # replaced, like the samples
            errors_path.unlink(missing_ok=True)
        reward_errors = RewardErrorLog(
            entries,
            errors_path.parent if dist.is_main else None,
            file_name=errors_path.name,
            echo=lambda message: print(message, file=sys.stderr, flush=True),
        )
        generator = None
        try:
            device, dtype = resolve_device_dtype(config.model.dtype)
            if dist.is_main and device.type == "cpu" and (busy := busy_cpu_warning()):
                print(f"rlvr: warning: {busy}", file=sys.stderr, flush=True)
            model, tokenizer, model_desc = _load_model(config, model_path, device, dtype)
            prompts = PromptSet(rows, data_cfg, tokenizer, t.max_prompt_length)
            run = RunInfo.from_config(
                config,
                num_generations=k,
                device=device,
                dtype=dtype,
                evaluation=True,
                multi_turn=config.environment is not None and multi_turn(config, host),
            )
            evaluation = Evaluation(
                config,
                prompts,
                k=k,
                metric=metric,
                threshold=threshold,
                host=host,
                run=run,
                eos_ids=eos_token_ids(model, tokenizer),
            )
            generator = build_generator(backend, backend_params, run, model, tokenizer)
            set_seed(t.seed)
            records, summary = evaluation.run(
                generator,
                scorer,
                backend=backend_name,
                schedules_batches=backend.capabilities.schedules_batches,
                dist=dist,
                progress=progress,
                reward_errors=reward_errors,
            )
        finally:
            if generator is not None:
                generator.close()
            scorer.close()

    summary.update(
        {
            "model": model_desc,
            "data": data_desc,
            "split": split_name,
            "num_prompts": len(prompts),
            "k": k,
            "num_samples": len(records),
            "metric": evaluation.metric,
            "threshold": evaluation.threshold,
            "metric_rule": evaluation.correctness.rule,
            "format_checks": dict(evaluation.format_checks),
            "backend": backend_name,
            "device": run.device,
            "dtype": run.dtype,
            "temperature": t.temperature,
            "top_p": t.top_p,
            "max_completion_length": t.max_completion_length,
            "seed": t.seed,
            "total_time": time.perf_counter() - start,
            "samples": str(samples_path),
            "summary": str(summary_path),
            "reward_errors": str(errors_path) if errors_path.is_file() else None,
        }
    )
    summary = {key: _clean(v) for key, v in summary.items()}
    if not dist.is_main:  # rank 0 writes the files
        return summary
    samples_path.parent.mkdir(parents=True, exist_ok=True)
    summary_path.parent.mkdir(parents=True, exist_ok=True)
    with open(samples_path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, default=str, ensure_ascii=False) + "\n")
    summary_path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _backend(config: Any, host: Any) -> tuple[str, Any, Any]:
    if config.backend is None:
        name = DEFAULT_BACKEND
        record = host.backends.get(name)
        if record is None:
            raise EvalError(f"no `backend:` in the config and the default {name!r} is missing")
        params = record.params()
    else:
        name, params = config.backend.name, config.backend.params
        record = host.backends[name]
    missing = record.available()
    if missing:
        raise EvalError(f"backend {name!r} cannot run here: {missing}")
    return name, params, record


def _load_model(
    config: Any, model_path: Path | None, device: Any, dtype: Any
) -> tuple[Any, Any, str]:
    cfg = config.model
    if model_path is not None and lora.is_adapter_checkpoint(model_path):
        model, tokenizer = load_policy(cfg, device=device, dtype=dtype)
        model = lora.merged(lora.load_adapters(model, model_path, trainable=False))
        model.eval()
        base = cfg.name_or_path + (f" ({cfg.gguf_file})" if cfg.gguf_file else "")
        return model, tokenizer, f"{model_path} (LoRA adapter on {base})"
    if model_path is not None:
        cfg = cfg.model_copy(
            update={"name_or_path": str(model_path), "gguf_file": None, "revision": None}
        )
    model, tokenizer = load_policy(cfg, device=device, dtype=dtype)
    model.eval()
    desc = cfg.name_or_path + (f" ({cfg.gguf_file})" if cfg.gguf_file else "")
    return model, tokenizer, desc


__all__ = ["evaluate"]
