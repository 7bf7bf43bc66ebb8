"""One evaluation pass: :class:`Evaluation` generates ``k`` completions per eval prompt in calls
of :func:`eval_call_sequences` completions, scores and judges them, and summarises them
(pass@j, accuracy, format compliance, rewards, lengths). ``rlvr eval`` and the trainer's
in-training evaluation both run it, so both report the same figures.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tqdm.auto import tqdm

from rlvr.api.host import create_host
from rlvr.api.runtime import RunInfo, SamplingParams, TrainerState
from rlvr.config.schema import multi_turn
from rlvr.evaluation.correctness import correctness, format_checks, is_format_ok
from rlvr.evaluation.errors import EvalError
from rlvr.functional import mean_pass_at_k
from rlvr.model.loading import (
    eos_token_ids,
)
from rlvr.outputs.metrics_compute import length_metrics, reward_metrics
from rlvr.parallel import distributed
from rlvr.rewards.failures import RewardErrorLog
from rlvr.rewards.scoring import RewardStats, merge_summaries
from rlvr.rollout.episodes import EpisodeRunner, episode_runner
from rlvr.rollout.runner import merge_episode_counts, sample_and_score, sample_record, step_seed


def pass_at_ks(k: int) -> list[int]:
    """The ``j`` of the reported ``pass@j``: 1, every power of two below ``k``, and ``k``."""
    out = {1, k}
    j = 2
    while j < k:
        out.add(j)
        j *= 2
    return sorted(out)


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
        failed = next((r for r in records if r.get("failed") is not None), None)
        if failed is not None:  # what an error names when too many episodes failed
            summary["first_failure"] = f"row {failed['index']}: {failed['failed']}"
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


__all__ = ["Evaluation", "SCHEDULED_CALL_SEQUENCES", "eval_call_sequences", "pass_at_ks"]
