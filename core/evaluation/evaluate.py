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
  ``correct`` (the built-in ``format``: the score of a full match), :func:`format_checks`.
- **pass@k**: the unbiased estimator of Chen et al. (2021), :func:`pass_at_k`, with ``n = k``
  samples per prompt, averaged over prompts; ``pass@j`` is also reported for every power of
  two ``j < k`` (more useful than pass@k alone when ``k`` is large).
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
import re
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from tqdm.auto import tqdm
from transformers import set_seed

from rlvr.api.errors import ConfigWarning, RlvrError
from rlvr.api.host import build_generator, create_host
from rlvr.api.registration import Params
from rlvr.api.runtime import RunInfo, SamplingParams, TrainerState
from rlvr.config.schema import DEFAULT_BACKEND, multi_turn
from rlvr.data.prompts import PromptSet, data_source, load_rows, require_fields
from rlvr.model import lora
from rlvr.model.loading import (
    busy_cpu_warning,
    eos_token_ids,
    load_policy,
    resolve_device_dtype,
)
from rlvr.outputs.checkpoint import (
    MANIFEST,
    best_checkpoint,
    damage,
    latest_checkpoint,
    list_checkpoints,
)
from rlvr.outputs.metrics import length_metrics, reward_metrics
from rlvr.parallel import distributed
from rlvr.rewards.failures import ERRORS_FILE, RewardErrorLog
from rlvr.rewards.functions import FUNCTION_REWARD
from rlvr.rewards.scoring import RewardStats, Scorer, merge_summaries, score_entries
from rlvr.rollout.episodes import EpisodeRunner, episode_runner
from rlvr.rollout.runner import merge_episode_counts, sample_and_score, sample_record, step_seed

logger = logging.getLogger("rlvr.evaluation.evaluate")

_DATA_SUFFIXES = (".json", ".jsonl", ".parquet")
SAMPLES_NAME = "samples.jsonl"
SUMMARY_NAME = "summary.json"


class EvalError(RlvrError, ValueError):
    """The evaluation cannot run as asked (bad k, split, metric, checkpoint...)."""


# --------------------------------------------------------------------------- pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from ``n`` samples of which ``c`` are correct:
    ``1 - C(n - c, k) / C(n, k)`` (Chen et al. 2021, "Evaluating Large Language Models Trained
    on Code"): the probability that at least one of ``k`` samples drawn without replacement
    from the ``n`` is correct. Exact (integer binomials), so it is fine for any ``n``.

    >>> pass_at_k(5, 2, 1), pass_at_k(5, 2, 2)
    (0.4, 0.7)
    """
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need n >= 1 and 0 <= c <= n (got n={n}, c={c})")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n (got k={k}, n={n})")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_ks(k: int) -> list[int]:
    """The ``j`` of the reported ``pass@j``: 1, every power of two below ``k``, and ``k``."""
    out = {1, k}
    j = 2
    while j < k:
        out.add(j)
        j *= 2
    return sorted(out)


def mean_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> float:
    """pass@k averaged over prompts, ``counts`` being ``(n, c)`` per prompt."""
    if not counts:
        return math.nan
    return sum(pass_at_k(n, c, k) for n, c in counts) / len(counts)


# --------------------------------------------------------------------------- resolution


class Correctness(NamedTuple):
    """Which reward decides correctness, from what score, and why it was chosen."""

    label: str | None  #: None: no reward qualifies; accuracy and pass@k are not reported
    threshold: float | None
    rule: str  #: how it was chosen, for the console and the summary


#: A ``callable`` reward named like one that checks answers...
_ACCURACY_NAME = re.compile(r"accura|correct", re.IGNORECASE)
#: ...and not like one that checks the form.
_FORM_NAME = re.compile(r"format|length|len_|style|tag", re.IGNORECASE)
NO_CORRECTNESS = (
    "no reward checks answers: mark one with `correctness: true` or pass --metric LABEL"
)


def correctness(
    config: Any,
    metric: str | None = None,
    threshold: float | None = None,
    host: Any = None,
) -> Correctness:
    """The reward deciding whether a completion is correct, by the rule of the module doc.
    ``host`` says which plugins check answers (default: the installed plugins)."""
    entries = list(config.rewards)
    if not entries:
        env = getattr(config, "environment", None)
        why = ""
        if env is not None and env.name != "single_turn":
            why = (
                f"; the rewards of environment {env.name!r} are not used by evaluation, which "
                "samples single completions: add a reward that scores the answer, with "
                "`weight: 0.0` to leave training as it is (for reasoning_gym: "
                "{name: reasoning_gym, label: rg_eval, weight: 0.0})"
            )
        raise EvalError(f"evaluation needs at least one reward in the config's `rewards:`{why}")
    if metric is not None:
        found = [e for e in entries if e.key == metric]
        if not found:
            labels = ", ".join(e.key for e in entries)
            raise EvalError(f"metric {metric!r} is not a configured reward label ({labels})")
        entry, rule = found[0], "chosen with --metric"
    else:
        entry, rule = _correctness_entry(entries, host)
        if entry is None:
            return Correctness(None, None, NO_CORRECTNESS)
    value = float(_declared_correct(entry) if threshold is None else threshold)
    return Correctness(entry.key, value, rule)


def _correctness_entry(entries: Sequence[Any], host: Any) -> tuple[Any, str]:
    marked = [e for e in entries if getattr(e, "correctness", False)]
    if marked:
        return marked[0], "marked `correctness: true`"
    if host is None:
        host = create_host()
    for e in entries:
        record = host.rewards.get(e.name)
        if record is not None and getattr(record, "correctness", False):
            return e, f"the {e.name} reward checks answers"
    for e in entries:
        if e.name not in ("callable", FUNCTION_REWARD):
            continue
        names = [e.key, str(getattr(e.params, "function", "")).rpartition(":")[2]]
        if any(_ACCURACY_NAME.search(n) for n in names) and not any(
            _FORM_NAME.search(n) for n in names
        ):
            return e, "a callable reward named for accuracy"
    return None, NO_CORRECTNESS


def _declared_correct(entry: Any) -> float:
    """The score at which a reward counts as satisfied: its params' ``correct`` when it
    declares one (``answer``, ``numbers``: a correct answer; ``format``: a full match), else 1.0."""
    correct = getattr(entry.params, "correct", None)
    is_number = isinstance(correct, int | float) and not isinstance(correct, bool)
    return float(correct) if is_number and correct is not None else 1.0


def format_checks(config: Any) -> list[tuple[str, float]]:
    """``(label, threshold)`` of every reward whose plugin is ``format``: a completion is
    *format-compliant* when each of them scores at least its declared ``correct`` (for the
    built-in ``format`` reward: the score of a full match, tag credit included). Empty when no
    ``format`` reward is configured (compliance is then not reported)."""
    return [(e.key, _declared_correct(e)) for e in config.rewards if e.name == "format"]


def is_format_ok(rewards: Mapping[str, float | None], checks: Sequence[tuple[str, float]]) -> bool:
    """Whether a completion's raw reward values pass every format check (None fails)."""
    return all((v := rewards.get(label)) is not None and v >= thr for label, thr in checks)


def eval_data(data: Any, split: str | None = None) -> tuple[Any, str | None, str]:
    """``(data config to load, split, description)`` of the eval data (see the module doc);
    the split is None when the eval data is a single file.

    ``data`` is the config's :class:`rlvr.config.schema.DataConfig`; the returned copy has ``path``
    set to the eval source and ``max_samples`` cleared.
    """
    explicit = split is not None
    source: str = split if split is not None else (data.eval_split or data.split)
    name: str | None = source
    if Path(source).suffix.lower() in _DATA_SUFFIXES or Path(source).expanduser().is_file():
        path, name, desc = source, None, source  # a file path is the split
    elif data.reasoning_gym is not None or data.source not in (None, "file"):
        # a data source gives its eval rows as a split (reasoning-gym's held-out ones: "test")
        cfg = data.model_copy(update={"split": source, "max_samples": None})
        return cfg, source, data_source(data, source)
    else:
        path = data.eval_path or data.path
        if path is None and data.source == "file":  # data: {source: file, params: {path}}
            path = data.params.path
        if path is None:  # the training rows came from memory (rlvr.Trainer(dataset=...))
            raise EvalError(
                "no eval data: set data.eval_path (or pass eval_dataset= to rlvr.Trainer, or "
                "--split PATH/TO/FILE.jsonl to rlvr eval)"
            )
        if Path(path).expanduser().is_file():
            if explicit:
                raise EvalError(
                    f"the eval data {path!r} is a single file, which has no split {split!r}; "
                    "pass --split PATH/TO/FILE.jsonl, or set data.eval_path to a directory or "
                    "hub dataset with splits"
                )
            if data.eval_path is None:  # one place: validate's check and the run warn once
                warnings.warn(
                    f"data.path {path!r} is a single file (no splits) and data.eval_path is not "
                    "set: evaluating on the TRAINING data; set data.eval_path or pass --split "
                    "FILE",
                    ConfigWarning,
                    stacklevel=1,
                )
            name, desc = None, path
        else:
            desc = f"{path} [{name}]"
    update = {
        "path": str(path),
        "split": name or data.split,
        "max_samples": None,
        "reasoning_gym": None,
        "source": None,  # the eval path as the shorthand of source: file
        "params": Params(),
    }
    cfg = data.model_copy(update=update)
    return cfg, name, desc


def resolve_checkpoint(checkpoint: str | Path) -> Path:
    """A model directory (or ``.gguf`` file) from ``checkpoint``: itself, or, when it is a
    run's ``output_dir``, the checkpoint ``training.keep_best`` kept, else the latest complete
    one (which of them is said on stderr); checked against its manifest when it has one, as
    ``--resume`` checks (a flipped byte in the weights would load silently and give wrong
    numbers)."""
    path = _located(checkpoint)
    if path.is_dir() and (path / MANIFEST).is_file():
        problem = damage(path)
        if problem is not None:
            others = [p.name for p in list_checkpoints(path.parent) if p != path]
            hint = f" (beside it: {', '.join(others)})" if others else ""
            raise EvalError(
                f"checkpoint {path} is damaged: {problem}; evaluate another checkpoint"
                f"{hint}, or restore the file from a copy"
            )
    return path


def _located(checkpoint: str | Path) -> Path:
    """The model directory or file ``checkpoint`` names (see :func:`resolve_checkpoint`)."""
    path = Path(checkpoint).expanduser()
    if not path.exists():
        there = [p.name for p in list_checkpoints(path.parent)] if path.parent.is_dir() else []
        hint = f" ({path.parent} holds {', '.join(there)})" if there else ""
        raise EvalError(f"checkpoint {str(checkpoint)!r} does not exist{hint}")
    if (
        path.is_dir()
        and not (path / "config.json").is_file()
        and not lora.is_adapter_checkpoint(path)
    ):
        latest = latest_checkpoint(path)
        if latest is None:
            raise EvalError(
                f"checkpoint {str(checkpoint)!r} is neither a model directory (no config.json), "
                "nor a LoRA adapter (no adapter_config.json), nor a run output_dir with a "
                "complete checkpoint-<step>"
            )
        best = best_checkpoint(path)
        if best is not None:
            chosen = best["path"]
            why = (
                f"the best in-training eval ({best['metric']} {float(best['value']):.3f} at step "
                f"{best['step']}, training.keep_best)"
            )
            if chosen != latest:
                why += f"; the latest is {latest.name} (name it to evaluate that one)"
        else:
            chosen, why = latest, "the run's latest complete checkpoint"
        print(f"rlvr: evaluating {chosen}: {why}", file=sys.stderr, flush=True)
        return chosen
    return path


def output_paths(
    config: Any, output: str | Path | None, model_path: Path | None = None
) -> tuple[Path, Path]:
    """``(samples JSONL, summary JSON)`` for ``output`` (see the module doc). Without
    ``output``, a directory of its own under ``training.output_dir/eval/`` named by what is
    evaluated (:func:`default_eval_dir`), so a before/after pair never overwrites itself."""
    if output is None:
        folder = default_eval_dir(Path(config.training.output_dir) / "eval", model_path)
        return folder / SAMPLES_NAME, folder / SUMMARY_NAME
    out = Path(output).expanduser()
    if out.is_dir() or not out.suffix:
        paths = out / SAMPLES_NAME, out / SUMMARY_NAME
    else:
        paths = out, out.with_name(out.stem + ".summary.json")
    replaced = [str(p) for p in paths if p.exists()]
    if replaced:  # asked for by name: replaced, but never silently
        logger.warning("--output: replacing %s", ", ".join(replaced))
    return paths


def default_eval_dir(parent: Path, model_path: Path | None) -> Path:
    """``parent/base`` for the config's model, ``parent/<name>`` for a checkpoint
    (``checkpoint-40``, a ``.gguf`` file's stem); when that already holds an evaluation,
    ``<name>-2``, ``<name>-3``, ...: an earlier evaluation is never replaced."""
    if model_path is None:
        name = "base"
    else:
        name = model_path.stem if model_path.suffix == ".gguf" else model_path.name
    folder, n = parent / name, 1
    while folder.exists() and any(folder.iterdir()):
        n += 1
        folder = parent / f"{name}-{n}"
    return folder


# --------------------------------------------------------------------------- one evaluation


class Evaluation:
    """The eval prompts and how completions are judged: shared by ``rlvr eval`` and the
    trainer's in-training evaluation (``training.eval_steps``), so both report the same figures.

    ``greedy``: temperature 0 and one completion per prompt; otherwise the training section's
    sampling settings with ``k`` completions per prompt. Each call of :meth:`run` draws the same
    seeds (from ``training.seed``, never a training step's), so repeated evaluations of a
    changing policy differ by the policy alone, and :meth:`run` leaves the global RNGs alone.

    With a multi-turn environment each sample is an episode (module docstring). ``run``: the
    run facts its environment is built with (default: the config's); ``eos_ids``: the ids that
    end a turn (default: the generator's ``eos_ids``, else the tokenizer's end-of-sequence).
    """

    def __init__(
        self,
        config: Any,
        prompts: Any,
        *,
        k: int = 1,
        greedy: bool = False,
        metric: str | None = None,
        threshold: float | None = None,
        host: Any = None,
        run: RunInfo | None = None,
        eos_ids: Sequence[int] | None = None,
    ) -> None:
        if k < 1:
            raise EvalError(f"k must be >= 1 (got {k})")
        if host is None and getattr(config, "environment", None) is not None:
            host = create_host()  # which environments have turns
        self.host = host
        self.multi_turn = host is not None and multi_turn(config, host)
        self.run_info = run
        self.eos_ids = list(eos_ids) if eos_ids is not None else None
        self._environment: Any = None  # built at the first run, kept for the next ones
        self.config = config
        self.prompts = prompts
        self.k = k
        self.greedy = greedy
        self.correctness = correctness(config, metric, threshold, host)
        self.metric, self.threshold = self.correctness.label, self.correctness.threshold
        self.format_checks = format_checks(config)
        self.labels = [e.key for e in config.rewards]

    def sampling(self, call: int, rank: int) -> Any:
        """The sampling settings of generation call ``call`` on ``rank``: the trainer's
        per-step seeds with step 0 (never a training step) and the call as the round."""
        t = self.config.training
        params = SamplingParams.from_training(t, step_seed(t.seed, 0, call, rank))
        return replace(params, temperature=0.0) if self.greedy else params

    def run(
        self,
        generator: Any,
        scorer: Any,
        *,
        backend: str,
        dist: distributed.Dist,
        schedules_batches: bool = False,
        progress: bool = False,
        reward_errors: RewardErrorLog | None = None,
        step: int | None = None,
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Generate and score every prompt; return the sample records (every rank gets all of
        them, in prompt order) and the summary of :meth:`summarize`. ``schedules_batches``:
        the backend's capability of that name (:func:`eval_call_sequences`). ``reward_errors``
        reports the rewards' failures (``step``: the training step, for its records)."""
        start = time.perf_counter()
        sequences = eval_call_sequences(self.config.training, schedules_batches)
        runner = self._episodes(generator) if self.multi_turn else None
        try:
            records, summaries, gen_time, score_time, env = _sample_and_score(
                self,
                generator,
                scorer,
                sequences,
                progress,
                backend,
                dist,
                reward_errors,
                step,
                runner,
            )
        finally:
            if runner is not None:
                runner.close()
        summary = self.summarize(records, summaries)
        summary.update(env)
        summary["generation_time"] = gen_time
        summary["scoring_time"] = score_time
        summary["total_time"] = time.perf_counter() - start
        return records, summary

    def _episodes(self, generator: Any) -> EpisodeRunner:
        """The runner of this evaluation's episodes on ``generator`` (its environment built
        once, at the first evaluation)."""
        run = self.run_info or RunInfo.from_config(
            self.config, num_generations=self.k, evaluation=True, multi_turn=True
        )
        tokenizer = self.prompts.tokenizer
        eos = self.eos_ids or list(getattr(generator, "eos_ids", None) or [])
        runner = episode_runner(
            self.config,
            self.host,
            run,
            generator,
            self.prompts,
            eos or eos_token_ids(None, tokenizer),
            environment=self._environment,
        )
        self._environment = runner.environment
        return runner

    def summarize(self, records: Sequence[dict[str, Any]], summaries: Sequence[Any]) -> dict:
        """pass@j, ``accuracy``, ``format_ok`` (fraction of format-compliant completions; only
        with a ``format`` reward), reward means/stds and completion lengths of ``records``."""
        k = self.k
        out: dict[str, Any] = {}
        if self.metric is not None:  # else no reward checks answers: mean rewards only
            counts = []
            for i in range(len(self.prompts)):
                mine = records[i * k : (i + 1) * k]
                counts.append((len(mine), sum(r["correct"] for r in mine)))
            out.update({f"pass@{j}": mean_pass_at_k(counts, j) for j in pass_at_ks(k)})
            out["accuracy"] = sum(c for _, c in counts) / max(len(records), 1)
        if self.format_checks:
            out["format_ok"] = sum(r["format_ok"] for r in records) / max(len(records), 1)
        scored = [r["reward"] for r in records if "failed" not in r]  # failed episodes: none
        out.update(reward_metrics(RewardStats.of(scored), merge_summaries(summaries)))
        out.update(
            length_metrics([r["num_tokens"] for r in records], [r["truncated"] for r in records])
        )
        return out


def eval_prompt_rows(config: Any, host: Any, split: str | None, limit: int | None):
    """``(rows, data config, split, description)`` of the eval data: :func:`eval_data`, its
    first ``limit`` rows, checked for the fields the rewards need."""
    if limit is not None and limit < 1:
        raise EvalError(f"limit must be >= 1 (got {limit})")
    data_cfg, split_name, data_desc = eval_data(config.data, split)
    rows = load_rows(data_cfg, host, split=split_name)
    if limit is not None:
        rows = rows[:limit]
    require_fields(
        rows,
        config.rewards,
        host,
        prompt_field=data_cfg.prompt_field,
        source=f"eval data {data_desc!r}",
    )
    return rows, data_cfg, split_name, data_desc


# --------------------------------------------------------------------------- rlvr eval


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
    :func:`pass_at_ks`), ``accuracy`` (fraction of correct completions, equal to pass@1),
    ``format_ok`` (fraction of format-compliant completions, :func:`format_checks`; only with a
    ``format`` reward), ``reward``/``reward_std`` and
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
    errors_path = _errors_path(samples_path, summary_path)
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
    failed = next((r for r in records if r.get("failed") is not None), None)
    if failed is not None:  # what `rlvr eval` names when every episode failed
        summary["first_failure"] = f"row {failed['index']}: {failed['failed']}"
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


def _errors_path(samples: Path, summary: Path) -> Path:
    """Where the rewards' failures go: beside the samples, named like the summary."""
    if summary.name == SUMMARY_NAME:
        return samples.parent / ERRORS_FILE
    return samples.with_name(samples.stem + "." + ERRORS_FILE)


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


# --------------------------------------------------------------------------- internals


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


#: The least completions per eval generation call for a backend that schedules its own
#: batches: enough to fill its decode batch (vLLM's max_num_seqs defaults to 256), few enough
#: that the progress bar moves.
SCHEDULED_CALL_SEQUENCES = 256


def eval_call_sequences(training: Any, schedules_batches: bool) -> int:
    """Completions per generation call when evaluating: ``training.eval_batch_size`` when set.
    Otherwise a training step's worth, which the backend is known to hold (it generates that
    many every step); with hf on 2 CPU cores larger calls were slower (64 sequences a call took
    1.9x the time of 16: greedy rows wait for the longest), so hf stays there. A backend that
    schedules its own batches gets at least :data:`SCHEDULED_CALL_SEQUENCES` (vLLM on 2 CPU
    cores: 128 a call took 0.70x the time of 16)."""
    if training.eval_batch_size is not None:
        return training.eval_batch_size
    step = training.per_device_train_batch_size * training.gradient_accumulation_steps
    step *= training.num_generations
    return max(step, SCHEDULED_CALL_SEQUENCES) if schedules_batches else step


def _sample_and_score(
    evaluation: Evaluation,
    generator: Any,
    scorer: Any,
    sequences: int,
    progress: bool,
    backend_name: str,
    dist: distributed.Dist,
    reward_errors: RewardErrorLog | None,
    step: int | None,
    runner: EpisodeRunner | None = None,
) -> tuple[list[dict[str, Any]], list[Any], float, float, dict[str, float]]:
    """Generate and score in calls of about ``sequences`` completions per rank (with several
    ranks: each its slice of every call; the results gathered in order). With ``runner`` each
    completion is an episode; the last value is then the episodes' ``env/...`` figures."""
    config, prompts, k = evaluation.config, evaluation.prompts, evaluation.k
    per_call = max(1, sequences // k) * dist.world_size
    label, threshold, checks = evaluation.metric, evaluation.threshold, evaluation.format_checks
    records: list[dict[str, Any]] = []
    summaries = []
    env_counts: list[dict[str, float]] = []
    gen_time = score_time = 0.0
    bar = None
    if progress and dist.is_main:
        bar = tqdm(  # no bar where stderr is no terminal (a log file)
            total=len(prompts), desc="rlvr eval", unit="prompt", dynamic_ncols=True, disable=None
        )
    try:
        for call, first in enumerate(range(0, len(prompts), per_call)):
            every = list(range(first, min(first + per_call, len(prompts))))
            indices, _ = dist.shard(every)
            if not indices:
                continue
            got = sample_and_score(
                runner if runner is not None else generator,
                scorer,
                prompts,
                indices,
                k,
                evaluation.sampling(call, dist.rank),
                evaluation.labels,
                backend=backend_name,
                first_group=first,
                step=step,
                reward_errors=reward_errors,
                state=TrainerState(global_step=step or 0),  # the steps done when it runs
            )
            if got.episode_counts is not None:
                env_counts.append(got.episode_counts)
            gen_time += got.generation_time
            score_time += got.scoring_time
            summaries.append(got.summary)
            items = got.items
            for j, c in enumerate(items):
                record = {
                    "index": c.prompt_index,
                    "sample": j % k,
                    **sample_record(c, prompts, config.data.prompt_field),
                }
                if c.failed is not None:
                    record["reward"] = None
                if label is not None and threshold is not None:
                    value = c.rewards.get(label)  # none: a failed episode
                    record["correct"] = value is not None and value >= threshold
                if checks:
                    record["format_ok"] = is_format_ok(c.rewards, checks)
                records.append(record)
            if bar is not None:
                bar.update(len(every))
    finally:
        if bar is not None:
            bar.close()
    if dist.enabled:
        parts = dist.gather((records, summaries, gen_time, score_time, env_counts))
        records = sorted((r for p in parts for r in p[0]), key=lambda r: (r["index"], r["sample"]))
        summaries = [s for p in parts for s in p[1]]
        gen_time, score_time = max(p[2] for p in parts), max(p[3] for p in parts)
        env_counts = [c for p in parts for c in p[4]]
    return records, summaries, gen_time, score_time, merge_episode_counts(env_counts)


__all__ = [
    "Correctness",
    "all_failed",
    "EvalError",
    "Evaluation",
    "eval_call_sequences",
    "eval_prompt_rows",
    "format_checks",
    "headline",
    "is_format_ok",
    "correctness",
    "eval_data",
    "evaluate",
    "mean_pass_at_k",
    "default_eval_dir",
    "output_paths",
    "pass_at_k",
    "pass_at_ks",
    "report",
    "resolve_checkpoint",
]
