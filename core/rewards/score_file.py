"""``rlvr rewards score``: score a JSONL file of completions with the configured rewards.

Rows are read and written in batches, so a large file streams through the worker pool; a
malformed row is reported with its line number and skipped, and every good row is scored.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from rlvr.api.errors import RlvrError
from rlvr.api.host import PluginHost
from rlvr.api.registration import Sample
from rlvr.rewards.failures import RewardErrorLog
from rlvr.rewards.scoring import (
    RewardStats,
    Scorer,
    add_env_weighted,
    env_reward_key,
    merge_summaries,
    score_entries,
)


@dataclass
class ScoreReport:
    """What scoring a file did: per-reward statistics, throughput, and the rows it skipped."""

    summary: dict[str, RewardStats] = field(default_factory=dict)
    total: RewardStats | None = None
    scored: int = 0
    seconds: float = 0.0
    bad_rows: list[str] = field(default_factory=list)

    def table(self) -> str:
        head = f"{'reward':<20} {'mean':>9} {'std':>9} {'None':>6} {'timeouts':>9} {'errors':>7}"
        lines = [head, "-" * len(head)]
        rows = list(self.summary.items())
        if self.total is not None:
            rows.append(("(weighted sum)", self.total))
        for label, s in rows:
            lines.append(
                f"{label:<20} {_fmt(s.mean):>9} {_fmt(s.std):>9} {s.none_count:>6} "
                f"{s.timeouts:>9} {s.errors:>7}"
            )
        rate = self.scored / self.seconds if self.seconds else 0.0
        lines.append(
            f"{self.scored} rows scored in {self.seconds:.2f}s ({rate:.1f} rows/s); "
            f"{len(self.bad_rows)} malformed rows skipped"
        )
        return "\n".join(lines)


def _fmt(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.4f}"


def parse_row(
    line: str, lineno: int, tokenize: Callable[[str, Any], list[int] | None] | None = None
) -> tuple[Sample | None, dict[str, Any] | None, str | None]:
    """A row as ``(sample, row, None)``, or ``(None, None, why)`` when it is malformed.

    The completion's token ids: the row's ``completion_ids`` when it has them, else
    ``tokenize(completion, truncated)`` (``truncated``: the row's field, None without one) when
    given, else None."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        return None, None, f"line {lineno}: not valid JSON ({exc.msg})"
    if not isinstance(row, dict):
        return None, None, f"line {lineno}: expected a JSON object, got {type(row).__name__}"
    completion = row.get("completion")
    if not isinstance(completion, str):
        return None, None, f"line {lineno}: needs a string `completion` field"
    prompt = row.get("prompt", "")
    num_tokens = row.get("num_tokens")
    ids = row.get("completion_ids")
    if ids is not None and not _token_ids(ids):
        return None, None, f"line {lineno}: `completion_ids` must be a list of token ids (ints)"
    if ids is None and tokenize is not None:
        ids = tokenize(completion, row.get("truncated"))
    if not isinstance(num_tokens, int) and ids is not None:
        num_tokens = len(ids)
    # The samples.jsonl of `rlvr train` and `rlvr eval` keep the dataset row under "row": its
    # fields (e.g. GSM8K's `answer`) are what the rewards read, so rescoring such a file works.
    nested = row.get("row")
    fields = {**row, **nested} if isinstance(nested, dict) else row
    text = prompt if isinstance(prompt, str) else json.dumps(prompt)
    env = row.get("env_rewards", {})
    numbers_only = isinstance(env, dict) and all(
        isinstance(v, int | float) and math.isfinite(v) for v in env.values()
    )
    if not numbers_only:
        return None, None, f"line {lineno}: `env_rewards` must map names to finite numbers"
    sample = Sample(
        completion=completion,
        prompt=text,
        row=fields,
        num_tokens=num_tokens if isinstance(num_tokens, int) else None,
        completion_ids=tuple(ids) if ids is not None else None,
        group=text,  # a batched reward is called on the rows that share a prompt
    )
    return sample, row, None


def _token_ids(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(i, int) and not isinstance(i, bool) for i in value
    )


def tokenizer_ids(config: Any) -> Callable[[str, Any], list[int] | None] | None:
    """How rows without ``completion_ids`` get them: the config's model's tokenizer (loaded
    on the first such row), the text's tokens and, for a row that says ``truncated: false``
    (``samples.jsonl``'s rows do), the end-of-sequence token the sampler ended with, as
    training passes them to a TRL function. None without ``model:``, and for a model with
    ``trust_remote_code`` (loading its tokenizer would run its files). A tokenizer that does
    not load is a warning: the rows are scored with ``completion_ids=None``, as without one."""
    model = getattr(config, "model", None)
    if model is None or model.trust_remote_code:
        return None
    loaded: list[Any] = []

    def tokenize(text: str, truncated: Any) -> list[int] | None:
        if not loaded:
            from rlvr.model.loading import load_tokenizer  # transformers: only when needed

            try:
                loaded.append(load_tokenizer(model))
            except RlvrError as exc:
                print(f"warning: rows without completion_ids get None: {exc}", file=sys.stderr)
                loaded.append(None)
        tokenizer = loaded[0]
        if tokenizer is None:
            return None
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        if truncated is False and tokenizer.eos_token_id is not None:
            ids.append(tokenizer.eos_token_id)
        return ids

    return tokenize


def score_file(
    config: Any,
    host: PluginHost,
    input_path: str | Path,
    output_path: str | Path,
    *,
    workers: int = 2,
    batch_size: int = 256,
    progress: bool = True,
) -> ScoreReport:
    """Score every row of ``input_path`` into ``output_path``: adds ``rewards`` and ``reward``,
    and ``reward_errors`` (label -> error text) to rows where a reward failed.

    A batched reward (a TRL-style ``callable``) is called once on the rows that share a
    ``prompt`` (within a batch of about ``batch_size`` rows, which never splits adjacent rows
    of one prompt). The rewards get each row's ``completion_ids``: its own, else the config's
    model's tokens of the completion (:func:`tokenizer_ids`), else None.

    A row of a multi-turn run's ``samples.jsonl`` keeps its environment's rewards
    (``env_rewards``): they join ``rewards`` and the total with the config's
    ``environment.reward_weights``, as in training and ``rlvr eval``."""
    report = ScoreReport()
    summaries = []
    totals: list[float] = []
    start = time.perf_counter()
    lines = Path(input_path).read_text(encoding="utf-8").splitlines()
    bar = tqdm(total=len(lines), unit="row", disable=not progress, file=sys.stderr)
    entries = score_entries(config, host)
    labels = [e.label for e in entries]
    environment = getattr(config, "environment", None)
    weights = dict(environment.reward_weights) if environment is not None else {}
    failures = RewardErrorLog(entries, None, echo=lambda message: bar.write(message, sys.stderr))
    tokenize = tokenizer_ids(config)
    with (
        Scorer(entries, workers=workers) as scorer,
        open(output_path, "w", encoding="utf-8") as out,
    ):
        batch: list[tuple[Sample, dict[str, Any]]] = []

        def flush() -> None:
            scores = scorer.score([s for s, _ in batch], by_group=True)
            failures.report(scores, [s for s, _ in batch])  # first tracebacks, on_error: raise
            named = [row.get("env_rewards", {}) for _, row in batch]
            env = {
                env_reward_key(name, labels): RewardStats.of([n.get(name) for n in named])
                for name in dict.fromkeys(k for n in named for k in n)
            }
            summaries.append(scores.summary() | env)
            for i, (_, row) in enumerate(batch):
                row["rewards"] = {k: v[i] for k, v in scores.per_reward.items()}
                row["rewards"] |= {env_reward_key(k, labels): v for k, v in named[i].items()}
                row["reward"] = add_env_weighted(scores.total[i], named[i], weights)
                totals.append(row["reward"])
                errors = {k: v[i] for k, v in scores.failures.items() if i in v}
                if errors:  # why a reward has its fallback value in this row
                    row["reward_errors"] = errors
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
            out.flush()
            bar.update(len(batch))
            report.scored += len(batch)
            batch.clear()

        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                bar.update(1)
                continue
            sample, row, why = parse_row(line, lineno, tokenize)
            if why:
                report.bad_rows.append(why)
                bar.update(1)
                continue
            # never between two adjacent rows of one prompt: a batched reward sees them together
            if len(batch) >= batch_size and sample.prompt != batch[-1][0].prompt:  # type: ignore[union-attr]
                flush()
            batch.append((sample, row))  # type: ignore[arg-type]
        if batch:
            flush()
    bar.close()
    report.seconds = time.perf_counter() - start
    report.summary = merge_summaries(summaries)
    report.total = RewardStats.of(totals) if totals else None
    return report
