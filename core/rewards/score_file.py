"""``rlvr rewards score``: score a JSONL file of completions with the configured rewards.

Rows are read and written in batches, so a large file streams through the worker pool; a
malformed row is reported with its line number and skipped, and every good row is scored.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from rlvr.api.host import Host
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


def parse_row(line: str, lineno: int) -> tuple[Sample | None, dict[str, Any] | None, str | None]:
    """A row as ``(sample, row, None)``, or ``(None, None, why)`` when it is malformed."""
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
        group=text,  # a batched reward is called on the rows that share a prompt
    )
    return sample, row, None


def score_file(
    config: Any,
    host: Host,
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
    of one prompt), with ``completion_ids=None``: a file has texts, not tokens.

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
            sample, row, why = parse_row(line, lineno)
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
