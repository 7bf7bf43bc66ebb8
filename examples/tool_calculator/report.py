"""What the calculator episodes of ``rlvr eval`` runs did: accuracy and how the tool was used.

    python examples/tool_calculator/report.py outputs/calc_before outputs/calc_after [...]

Each argument is an eval output directory (or its ``samples.jsonl``) of the ``tools``
environment. One row per run, from each episode's transcript (the turns after the question):

- ``strict`` / ``lenient``: the share whose reward of that label is at least 1;
- ``calls``: episodes with at least one tool call (well-formed or not);
- ``malformed``: the tool calls answered with ``error: ...`` (broken JSON, an unknown tool, bad
  arguments), of all calls;
- ``past call``: of the turns that close a call (``</tool_call>``), those that go on writing
  after it (what a stop string at the call's end would cut);
- ``turns``: assistant turns per episode;
- ``copies``: of the episodes whose calculator returned a number, those whose final answer
  holds it (the answer reads the tool's result);
- ``truncated``: episodes ended by a limit.

With two or more runs, the paired difference of each later run against the first, per accuracy
label, with its 95% interval (``examples/compare_evals.py``'s ``paired``: by question).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Any

COMPARE = runpy.run_path(str(Path(__file__).resolve().parents[1] / "compare_evals.py"))
PAIRED = COMPARE["paired"]
LABELS = ("strict", "lenient")


def load(path: str) -> list[dict[str, Any]]:
    """The rows of an eval's ``samples.jsonl`` (compare_evals.py reads it), by question."""
    return [row for _, row in sorted(COMPARE["load"](path).items())]


def episode(transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turns after the question (the few-shot exchanges come before it); none for a
    single completion (no environment)."""
    if not transcript:
        return []
    last_user = max(i for i, m in enumerate(transcript) if m["role"] == "user")
    return transcript[last_user + 1 :]


def correct(row: dict[str, Any], label: str) -> float:
    return float((row["rewards"].get(label) or 0.0) >= 1.0)


def figures(rows: list[dict[str, Any]]) -> dict[str, float]:
    n = len(rows)
    calls = malformed = turns = called = truncated = with_result = copied = 0
    closed = past = 0
    for r in rows:
        turns_of = episode(r.get("transcript") or [])
        made = sum(len(m.get("tool_calls") or []) for m in turns_of if m["role"] == "assistant")
        tools = [m for m in turns_of if m["role"] == "tool"]
        calls += made
        called += made > 0
        malformed += sum(str(m.get("content", "")).startswith("error:") for m in tools)
        turns += sum(m["role"] == "assistant" for m in turns_of)
        for m in turns_of:
            text = str(m.get("content") or "") if m["role"] == "assistant" else ""
            if "</tool_call>" in text:
                closed += 1
                past += bool(text.rsplit("</tool_call>", 1)[1].strip())
        truncated += bool(r.get("truncated"))
        results = [str(m["content"]).strip() for m in tools if _is_number(m.get("content"))]
        if results:
            with_result += 1
            copied += results[-1] in r["completion"]
    out = {label: sum(correct(r, label) for r in rows) / n for label in LABELS}
    out.update(
        calls=called / n,
        malformed=malformed / max(calls, 1),
        past_call=past / max(closed, 1),
        turns=turns / n,
        copies=copied / max(with_result, 1),
        truncated=truncated / n,
    )
    return out


def _is_number(text: Any) -> bool:
    try:
        float(str(text).strip())
    except ValueError:
        return False
    return True


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    runs = {path: load(path) for path in argv}
    head = ["run", "n", *LABELS, "calls", "malformed", "past call", "turns", "copies", "truncated"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for path, rows in runs.items():
        f = figures(rows)
        pct = [f"{100 * f[k]:.1f}%" for k in (*LABELS, "calls", "malformed", "past_call")]
        rest = [f"{f['turns']:.2f}", f"{100 * f['copies']:.1f}%", f"{100 * f['truncated']:.1f}%"]
        print(f"| {path} | {len(rows)} | " + " | ".join(pct + rest) + " |")
    first_path, first = next(iter(runs.items()))
    for path, rows in list(runs.items())[1:]:
        if [(r["index"], r["sample"]) for r in rows] != [(r["index"], r["sample"]) for r in first]:
            print(f"error: {path} did not evaluate the same questions as {first_path}; "
                  "give both the same --limit and -k")  # fmt: skip
            return 1
        for label in LABELS:
            mean, low, high = PAIRED([correct(r, label) for r in first],
                                     [correct(r, label) for r in rows],
                                     [r["index"] for r in rows])  # fmt: skip
            print(f"{path} vs {first_path}, {label}: {100 * mean:+.1f} pts "
                  f"(95% CI {100 * low:+.1f} to {100 * high:+.1f})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
