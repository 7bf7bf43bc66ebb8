"""Compare two ``rlvr eval`` runs on the same prompts: accuracy and format compliance before and
after, with the paired difference and its 95% confidence interval.

    python examples/compare_evals.py outputs/eval_before outputs/eval_after [--accuracy LABEL]

Each argument is an eval output directory (or its ``samples.jsonl``). Completions are matched by
prompt index and sample number, so both runs must have used the same ``--limit`` and ``-k``. The
interval is the normal approximation for a paired difference of means over the prompts,
``mean(d) +- 1.96 * sd(d) / sqrt(n)`` with ``d = after - before`` per prompt (with ``-k 8``,
each prompt's mean over its 8 samples: the samples of one prompt are not independent, so the
prompt is the unit). ``--accuracy LABEL`` (repeatable) adds the share of completions whose
reward ``LABEL`` is at least 1, e.g. a lenient check beside the strict one that decides
accuracy. Each reward's mean follows (its raw score, unweighted, over the completions where
neither run has None: a 0/1 reward's mean is its pass rate, e.g. one ``format`` check of
several). The last row is the most frequent last line of the completions and its share, to catch
a policy that collapsed onto one answer that pays the format reward. Below the table, when the
rows carry a gold ``answer``: the accuracy of answering the commonest gold every time, the score
a policy collapsed onto one number can reach without reading a question (on GSM8K test[:500],
``6``: 3.6%, more than SmolLM2-135M's 2.0%). A warning names the settings in which the two runs'
``summary.json`` differ (dtype, device, backend, sampling, length), when both have one.
"""

from __future__ import annotations

import json
import math
import sys
from collections import Counter
from pathlib import Path

from rlvr.plugin import gold_from_row


def load(path: str) -> dict[tuple[int, int], dict]:
    file = Path(path)
    file = file / "samples.jsonl" if file.is_dir() else file
    rows = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    return {(r["index"], r["sample"]): r for r in rows}


#: Settings of ``summary.json`` that change what a model answers: two evals that differ in one
#: compare the settings as much as the models.
SETTINGS = ("dtype", "device", "backend", "temperature", "top_p", "max_completion_length")


def settings_differ(before: str, after: str) -> list[str]:
    """The :data:`SETTINGS` in which the two runs' ``summary.json`` files disagree (a run
    without one, or older than a setting, is not compared on it)."""
    found = []
    for path in (before, after):
        file = Path(path)
        file = file / "summary.json" if file.is_dir() else file.with_name("summary.json")
        found.append(json.loads(file.read_text()) if file.is_file() else {})
    b, a = found
    return [
        f"{key} ({b[key]} vs {a[key]})"
        for key in SETTINGS
        if key in b and key in a and b[key] != a[key]
    ]


def paired(
    before: list[float], after: list[float], prompts: list[int] | None = None
) -> tuple[float, float, float]:
    """Mean of the differences and its 95% interval (normal approximation), over the prompts
    when ``prompts`` gives each value's prompt index (values of one prompt averaged first)."""
    d = [a - b for a, b in zip(after, before, strict=True)]
    if prompts is not None:
        groups: dict[int, list[float]] = {}
        for index, x in zip(prompts, d, strict=True):
            groups.setdefault(index, []).append(x)
        d = [sum(xs) / len(xs) for xs in groups.values()]
    n = len(d)
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1)) if n > 1 else 0.0
    half = 1.96 * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def main(argv: list[str]) -> int:
    accuracy: list[str] = []
    while "--accuracy" in argv:
        at = argv.index("--accuracy")
        if at + 1 >= len(argv):
            print(__doc__, file=sys.stderr)
            return 2
        accuracy.append(argv[at + 1])
        argv = argv[:at] + argv[at + 2 :]
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    before, after = load(argv[0]), load(argv[1])
    if before.keys() != after.keys():
        print("the two evals are not on the same prompts and samples", file=sys.stderr)
        return 2
    keys = sorted(before)
    if differ := settings_differ(argv[0], argv[1]):
        print(f"warning: the evals differ in {', '.join(differ)}", file=sys.stderr)
    prompts = [k[0] for k in keys]
    print(f"{len(keys)} completions of {len(set(prompts))} prompts\n")
    print("| metric | before | after | difference (95% CI) |")
    print("|---|---:|---:|---:|")
    shares = [
        ("accuracy (pass@1)", lambda r: r.get("correct")),
        ("format compliance", lambda r: r.get("format_ok")),
    ]
    for label in accuracy:
        shares.append((f"accuracy by `{label}`", lambda r, label=label: _at_least_one(r, label)))
    for name, value in shares:
        if value(before[keys[0]]) is None:
            continue
        b = [float(value(before[k])) for k in keys]
        a = [float(value(after[k])) for k in keys]
        mean, low, high = paired(b, a, prompts)
        print(
            f"| {name} | {100 * sum(b) / len(b):.1f}% | {100 * sum(a) / len(a):.1f}% "
            f"| {100 * mean:+.1f} pts ({100 * low:+.1f} to {100 * high:+.1f}) |"
        )
    for label in before[keys[0]].get("rewards", {}):
        pairs = [
            (k[0], b, a)
            for k in keys
            if (b := before[k].get("rewards", {}).get(label)) is not None
            and (a := after[k].get("rewards", {}).get(label)) is not None
        ]
        if pairs:
            mean, low, high = paired(
                [b for _, b, _ in pairs], [a for _, _, a in pairs], [i for i, _, _ in pairs]
            )
            print(
                f"| reward `{label}` (mean) | {sum(b for _, b, _ in pairs) / len(pairs):.3f} "
                f"| {sum(a for _, _, a in pairs) / len(pairs):.3f} "
                f"| {mean:+.3f} ({low:+.3f} to {high:+.3f}) |"
            )
    for name in ("completion_length", "truncated"):
        b = [float(before[k]["num_tokens" if name == "completion_length" else name]) for k in keys]
        a = [float(after[k]["num_tokens" if name == "completion_length" else name]) for k in keys]
        print(f"| {name.replace('_', ' ')} | {sum(b) / len(b):.2f} | {sum(a) / len(a):.2f} | |")
    cells = [commonest_last_line([r[k]["completion"] for k in keys]) for r in (before, after)]
    print(f"| commonest last line (collapse check) | {cells[0]} | {cells[1]} | |")
    if constant := constant_answer_baseline([before[k].get("row", {}) for k in keys]):
        print(f"\nconstant-answer baseline: {constant}")
    return 0


def _at_least_one(row: dict, label: str) -> bool | None:
    """Whether reward ``label`` scored the completion 1 or more (None: the eval has no such
    reward); a None score (not scored) counts as wrong."""
    rewards = row.get("rewards", {})
    if label not in rewards:
        return None
    return rewards[label] is not None and rewards[label] >= 1


def constant_answer_baseline(rows: list[dict]) -> str | None:
    """The commonest gold answer and the accuracy of always giving it (None without golds)."""
    try:
        golds = [gold_from_row(row) for row in rows]
    except KeyError:
        return None
    gold, count = Counter(golds).most_common(1)[0]
    return f"answering `{gold}` to every question scores {100 * count / len(golds):.1f}%"


def commonest_last_line(completions: list[str]) -> str:
    """The most frequent last line and its share: a policy that found one answer that pays
    the format reward (e.g. a prompt's example answer, copied) shows up here."""
    lines = [(c.strip().splitlines() or [""])[-1].strip() for c in completions]
    line, count = Counter(lines).most_common(1)[0]
    return f"`{line[:40]}` {100 * count / len(lines):.1f}%"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
