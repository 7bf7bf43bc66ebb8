"""The tables and figure of docs/experiments/smollm2-reasoning-gym.md from the outputs of
examples/reasoning_gym_experiment.sh:

    python examples/reasoning_gym_report.py outputs/rg

OUT holds ``before/{greedy,sampled,train}`` (the base model's evals) and, per seed,
``seedN/run`` (the training run) and ``seedN/after/{greedy,sampled,train}``. Every difference is
paired by problem, with its 95% interval over the problems (compare_evals.py's ``paired``):
greedy accuracy, strict (the answer block) and lenient (the last number counts too); sampled
pass@1 (the mean of 8 samples a problem at the training temperature); pass@8. Then format
compliance, length, the best constant answer, the training-set check (problems the base model
solves 20-80% of the time) and each run's time split. Draws OUT/curves.png.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from statistics import mean

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_evals import load, paired  # noqa: E402

Evals = dict[tuple[int, int], dict]


def per_problem(rows: Evals, value) -> dict[int, list[float]]:
    """Each problem's values over its samples."""
    out: dict[int, list[float]] = {}
    for (index, _), row in sorted(rows.items()):
        out.setdefault(index, []).append(float(value(row)))
    return out


def lenient(row: dict) -> bool:
    score = row["rewards"].get("lenient")
    return score is not None and score >= 1


def strict(row: dict) -> bool:
    return bool(row["correct"])


def any_of(values: list[float]) -> float:
    return float(max(values))


def compare(before: Evals, after: Evals, value, reduce=mean) -> tuple[float, float, tuple]:
    """Before, after and (difference, low, high), each problem reduced over its samples."""
    b, a = per_problem(before, value), per_problem(after, value)
    if b.keys() != a.keys():
        raise SystemExit("the before and after evals are not on the same problems")
    keys = sorted(b)
    xb, xa = [reduce(b[k]) for k in keys], [reduce(a[k]) for k in keys]
    return mean(xb), mean(xa), paired(xb, xa)


def cell(before: float, after: float, diff: tuple, percent: bool = True) -> list[str]:
    f = 100 if percent else 1
    unit = " pts" if percent else ""
    return [
        f"{f * before:.1f}" if percent else f"{before:.1f}",
        f"{f * after:.1f}" if percent else f"{after:.1f}",
        f"{f * diff[0]:+.1f}{unit} ({f * diff[1]:+.1f} to {f * diff[2]:+.1f})",
    ]


def constant_baseline(rows: Evals) -> tuple[str, float]:
    """The commonest gold answer and the accuracy of giving it to every problem."""
    golds = [str(r["row"]["answer"]) for (_, s), r in rows.items() if s == 0]
    gold, count = Counter(golds).most_common(1)[0]
    return gold, count / len(golds)


def training_check(before: Evals, after: Evals) -> str:
    """Sampled accuracy on training problems the base model solves 20-80% of the time."""
    b, a = per_problem(before, lenient), per_problem(after, lenient)
    mid = [k for k in b if 0.2 <= mean(b[k]) <= 0.8]
    if not mid:
        return "no training problem in the 20-80% band"
    diff = paired([mean(b[k]) for k in mid], [mean(a[k]) for k in mid])
    return (
        f"{len(mid)} problems: {100 * mean(mean(b[k]) for k in mid):.1f}% -> "
        f"{100 * mean(mean(a[k]) for k in mid):.1f}% "
        f"({100 * diff[0]:+.1f} pts, {100 * diff[1]:+.1f} to {100 * diff[2]:+.1f})"
    )


def time_split(run: Path) -> str:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "step_time" in r]
    wall = json.loads((run / "run_summary.json").read_text())["seconds"]
    parts = {
        "generation": sum(r["generation_time"] for r in steps),
        "scoring": sum(r["scoring_time"] for r in steps),
        "training": sum(r["training_time"] for r in steps),
        "held-out eval": sum(r.get("eval/time", 0.0) for r in rows),
    }
    parts["other"] = wall - sum(parts.values())
    split = ", ".join(f"{k} {v / 60:.1f} min ({100 * v / wall:.0f}%)" for k, v in parts.items())
    tokens = sum(r["num_tokens"] for r in steps)
    generation = parts["generation"]
    return (
        f"{len(steps)} steps in {wall / 60:.1f} min ({3600 * len(steps) / wall:.0f} steps/hour; "
        f"{tokens / generation:.0f} completion tokens/s of generation): {split}"
    )


def curves(out: Path, runs: dict[str, Path]) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: pip install 'rlvr[plot]' for curves.png)")
        return None
    panels = [
        ("training reward (strict, moving mean of 10 steps)", "rewards/strict/mean", False),
        ("held-out greedy accuracy, 200 problems (strict)", "eval/pass@1", True),
        ("completion length (tokens)", "completion_length/mean", False),
        ("format compliance (training samples)", "rewards/format/mean", False),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for ax, (title, key, is_eval) in zip(axes.flat, panels, strict=True):
        for seed, run in runs.items():
            rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
            points = [(r["step"], r[key]) for r in rows if key in r]
            if not is_eval:
                ys = [y for _, y in points]
                ys = [mean(ys[max(0, i - 9) : i + 1]) for i in range(len(ys))]
                points = [(x, y) for (x, _), y in zip(points, ys, strict=True)]
            xs, ys = [x for x, _ in points], [y for _, y in points]
            ax.plot(xs, ys, marker="o" if is_eval else None, label=seed)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = out / "curves.png"
    fig.savefig(path, dpi=110)
    return path


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    seeds = sorted(p for p in out.glob("seed*") if (p / "after" / "sampled").is_dir())
    base = {kind: load(str(out / "before" / kind)) for kind in ("greedy", "sampled")}
    print("| seed | metric | before (%) | after (%) | difference (95% CI) |")
    print("|---|---|---:|---:|---:|")
    for seed in seeds:
        after = {kind: load(str(seed / "after" / kind)) for kind in ("greedy", "sampled")}
        rows = [
            ("greedy accuracy, strict", "greedy", strict, mean),
            ("greedy accuracy, lenient", "greedy", lenient, mean),
            ("sampled pass@1, strict", "sampled", strict, mean),
            ("sampled pass@1, lenient", "sampled", lenient, mean),
            ("pass@8, lenient", "sampled", lenient, any_of),
            ("format compliance (greedy)", "greedy", lambda r: r.get("format_ok", 0), mean),
        ]
        for name, kind, value, reduce in rows:
            b, a, diff = compare(base[kind], after[kind], value, reduce)
            print(f"| {seed.name} | {name} | " + " | ".join(cell(b, a, diff)) + " |")
        b, a, diff = compare(base["greedy"], after["greedy"], lambda r: r["num_tokens"])
        print(
            f"| {seed.name} | length (greedy, tokens) | "
            + " | ".join(cell(b, a, diff, False))
            + " |"
        )
    gold, share = constant_baseline(base["greedy"])
    print(f"\nbest constant answer: `{gold}` scores {100 * share:.1f}% of the held-out problems")
    print(f"held-out problems: {len({k[0] for k in base['greedy']})}")
    for seed in seeds:
        if (out / "before" / "train").is_dir() and (seed / "after" / "train").is_dir():
            before, after = (load(str(d / "train")) for d in (out / "before", seed / "after"))
            check = training_check(before, after)
            print(f"{seed.name} training-set check: {check}")
    for seed in seeds:
        print(f"{seed.name} time: {time_split(seed / 'run')}")
    if path := curves(out, {s.name: s / "run" for s in seeds}):
        print(f"curves: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
