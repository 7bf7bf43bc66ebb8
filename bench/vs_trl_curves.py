"""rlvr against TRL's ``GRPOTrainer``, the same numbers: reward curves of the same tiny model
trained on the same task, over several seeds each, and whether they agree within noise.

    python bench/vs_trl_curves.py --seeds 4 --steps 100 --threads 1 --json curves.json --plot c.png

Where ``bench/vs_trl.py`` times one step of identical work, this trains: the quickstart's tiny
arithmetic model (``examples/quickstart/make_model.py``, written to a temp dir with its data) on
its 100 addition questions, in both frameworks, ``--seeds`` runs each, one process at a time
(rlvr and TRL alternate, so a change in the machine's load hits both). Everything else is
``bench/vs_trl.py``'s: its TRL venv, its workers, and its setting-by-setting mapping of the two
configs (:func:`vs_trl.rlvr_config` / :func:`vs_trl.trl_config`, documented there), here with

- prompts: each question as one user message (TRL's conversational format), rendered by the
  model's chat template in both; the row's ``answer`` column reaches the rewards as a keyword;
- rewards: :func:`answer_reward` (1 when ``<answer>N</answer>`` holds the row's answer) and
  :func:`format_reward` (1 for exactly one ``<answer>...</answer>`` and nothing else), plain
  TRL-style functions, weight 1 each, summed before the group normalisation in both (TRL's
  ``multi_objective_aggregation="sum_then_normalize"``); rlvr calls them through its
  ``callable`` reward in-process, TRL directly;
- GRPO, ``beta: 0``, ``loss_type: grpo`` (each completion's token mean, then the mean over
  completions, in both), ``scale_rewards: group``, one update per generation
  (``steps_per_generation: 1``, ``num_iterations: 1``), ``--prompts`` x ``--generations``
  completions per step of at most ``--max-completion-length`` tokens, temperature 1;
- AdamW at ``--learning-rate`` with ``constant_with_warmup`` over ``--warmup-steps`` (the
  quickstart's schedule, transformers' ``get_scheduler`` in both), grad-norm clip 1, float32.

The curve is each step's mean reward over its completions, which both frameworks log for the
completions sampled *before* that step's update (rlvr ``metrics.jsonl`` ``reward``; TRL's
``reward`` log with ``logging_steps=1``). Per seed it is summarised as the mean over the last
``--last`` steps and as the area under the whole curve (the mean over all steps); for each, the
difference rlvr - TRL of the means over seeds gets a 95% confidence interval from Welch's t
(unequal variances) and from a bootstrap over seeds (each framework's seeds resampled on their
own). Seeds are not paired: seed ``s`` drives different random streams in the two frameworks
(their samplers, data orders and generation draw differently), so pairing them would share
nothing. "agree within noise" means the Welch interval contains 0; its width says how large a
difference this many seeds could have told apart.

What differs and cannot be aligned through the configs (docs/experiments/vs-trl-curves.md
measures whether it matters): the random streams themselves (which prompt order, which
samples); TRL's ``RepeatSampler`` drops an epoch's last incomplete batch (100 rows, 16 per step:
4 rows sit out each epoch) where rlvr's sampler carries on into the next epoch; the group std is
Bessel-corrected in both but TRL adds 1e-4 to it and rlvr 1e-6 (for 0/1/2 rewards a non-zero
group std is at least 0.35, so the advantages differ by under 0.03%).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean, stdev
from typing import Any

import vs_trl

THIS = Path(__file__).resolve()
MAKE_MODEL = vs_trl.REPO / "examples" / "quickstart" / "make_model.py"
FRAMEWORKS = ("rlvr", "trl")
#: the curves compared: the summed reward (0-2), and each function's mean
METRICS = ("reward", "rewards/answer_reward", "rewards/format_reward")
#: the settings a --trl-from run must share with this one
SAME_RUN = (
    "seeds",
    "first_seed",
    "steps",
    "threads",
    "prompts",
    "generations",
    "max_completion_length",
    "learning_rate",
    "warmup_steps",
)
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
FORMAT = re.compile(r"<answer>[^<>]+</answer>")


def _text(completion: Any) -> str:
    """A TRL completion's text: a string, or (conversational) the last message's content."""
    return completion if isinstance(completion, str) else completion[-1]["content"]


def answer_reward(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """TRL-style: 1 when the first ``<answer>...</answer>`` holds the row's answer, else 0."""
    out = []
    for completion, gold in zip(completions, answer, strict=True):
        found = ANSWER.search(_text(completion))
        out.append(1.0 if found and found.group(1).strip() == str(gold).strip() else 0.0)
    return out


def format_reward(completions: list[Any], **kwargs: Any) -> list[float]:
    """TRL-style: 1 for exactly one non-empty ``<answer>...</answer>`` and nothing around it
    (keeps the policy from drifting into ``<answer>7</answer></answer>``), else 0."""
    return [1.0 if FORMAT.fullmatch(_text(c).strip()) else 0.0 for c in completions]


# --------------------------------------------------------------------------- settings


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=4, help="runs per framework")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="seeds FIRST..FIRST+N-1 (fresh seeds, to test again what an earlier run suggested)",
    )
    parser.add_argument("--steps", type=int, default=100, help="training steps per run")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in each worker")
    parser.add_argument("--prompts", type=int, default=16, help="prompts per step")
    parser.add_argument("--generations", type=int, default=8, help="completions per prompt")
    parser.add_argument("--max-completion-length", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--warmup-steps", type=int, default=20, help="linear warm-up, then flat")
    parser.add_argument("--last", type=int, default=20, help="K: compare the last K steps' mean")
    parser.add_argument("--block", type=int, default=10, help="steps per row of the table")
    parser.add_argument(
        "--trl-python", help="a python that imports trl (default: bench/vs_trl.py's venv)"
    )
    parser.add_argument(
        "--rlvr-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a dotted rlvr config key on rlvr's side only (a deliberate mismatch, e.g. "
        "training.learning_rate=5e-4: does the comparison see it?); repeatable",
    )
    parser.add_argument(
        "--trl-from",
        help="take TRL's curves from this --json of an earlier run with the same settings "
        "instead of training TRL again (with --rlvr-set: only rlvr's side changed)",
    )
    parser.add_argument("--json", help="write the curves and the statistics here")
    parser.add_argument("--plot", help="draw the mean curves with their spread here (a .png)")
    args = parser.parse_args(argv)
    for name in ("steps", "threads", "prompts", "max_completion_length", "last", "block"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.seeds < 2:
        parser.error("--seeds must be at least 2 (the spread over seeds is the noise)")
    if args.generations < 2:
        parser.error("--generations must be at least 2 (GRPO compares completions of a prompt)")
    if args.first_seed < 0:
        parser.error("--first-seed must be 0 or more")
    if args.last > args.steps:
        parser.error(f"--last {args.last} is more than --steps {args.steps}")
    if not 0 <= args.warmup_steps < args.steps:
        parser.error(f"--warmup-steps must be 0 or more and below --steps ({args.steps})")
    overrides = {}
    for item in args.rlvr_set:
        key, eq, value = item.partition("=")
        if not eq or not key:
            parser.error(f"--rlvr-set {item!r} is not KEY=VALUE (e.g. training.learning_rate=5e-4)")
        try:
            overrides[key] = json.loads(value)
        except json.JSONDecodeError:
            overrides[key] = value  # a bare string: loss_type=dapo
    args.rlvr_set = overrides
    if args.trl_from:
        try:
            earlier = json.loads(Path(args.trl_from).read_text())
            settings = earlier["settings"]
            for m in METRICS:
                earlier["curves"][m]["trl"]
            for key in ("mean_length", "seconds_per_step"):
                earlier[key]["trl"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            parser.error(f"--trl-from {args.trl_from}: not a --json of this script ({exc})")
        differ = [k for k in SAME_RUN if settings.get(k, 0) != getattr(args, k)]
        if differ:
            parser.error(f"--trl-from {args.trl_from} ran with other {', '.join(differ)}")
        args.trl_from_run = earlier
    return args


def curve_spec(
    args: argparse.Namespace, model_dir: Path, data: Path, out: Path, seed: int
) -> dict[str, Any]:
    """One run's work: ``vs_trl.work_spec`` (the shared settings) with this task's rewards,
    schedule and seed, on a CPU in float32, ``beta`` 0."""
    shared = argparse.Namespace(
        warmup=0,
        steps=args.steps,
        threads=args.threads,
        prompts=args.prompts,
        generations=args.generations,
        max_completion_length=args.max_completion_length,
        beta=0.0,
        learning_rate=args.learning_rate,
        device="cpu",
        precision="float32",
        trace_memory=False,
    )
    return {
        **vs_trl.work_spec(shared, model_dir, data, out),
        "rewards": [f"{THIS}:answer_reward", f"{THIS}:format_reward"],
        "lr_scheduler_type": "constant_with_warmup",
        "warmup_steps": args.warmup_steps,
        "seed": seed,
        "rlvr_set": args.rlvr_set,
    }


def write_task(root: Path) -> tuple[Path, Path]:
    """The quickstart's model and data under ``root`` (make_model.py, seeded: the same files
    every time), and its training rows as TRL conversational prompts: ``(model, prompts)``."""
    model, data = root / "tiny-arith", root / "data"
    subprocess.run(
        [sys.executable, str(MAKE_MODEL), "--model-dir", str(model), "--data-dir", str(data)],
        check=True,
        capture_output=True,
    )
    rows = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()]
    prompts = root / "prompts.jsonl"
    prompts.write_text(
        "".join(
            json.dumps(
                {"prompt": [{"role": "user", "content": r["question"]}], "answer": r["answer"]}
            )
            + "\n"
            for r in rows
        )
    )
    return model, prompts


# --------------------------------------------------------------------------- statistics


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (Numerical Recipes' betacf)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with ``df`` (real, > 0) degrees of freedom."""
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on :func:`t_cdf`; no scipy needed)."""
    lo, hi = -1e3, 1e3
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


def welch(a: list[float], b: list[float], level: float = 0.95) -> dict[str, float]:
    """mean(a) - mean(b) with Welch's t interval (unequal variances, Welch-Satterthwaite df)."""
    va, vb = stdev(a) ** 2 / len(a), stdev(b) ** 2 / len(b)
    diff, se = fmean(a) - fmean(b), math.sqrt(va + vb)
    if se == 0.0:
        return {"diff": diff, "lo": diff, "hi": diff, "se": 0.0, "df": math.inf}
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = t_quantile(0.5 + level / 2, df) * se
    return {"diff": diff, "lo": diff - half, "hi": diff + half, "se": se, "df": df}


def bootstrap(
    a: list[float], b: list[float], *, level: float = 0.95, draws: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of mean(a) - mean(b), each sample resampled with replacement on its
    own (unpaired), ``draws`` times with a seeded generator."""
    rng = random.Random(seed)
    diffs = sorted(
        fmean(rng.choices(a, k=len(a))) - fmean(rng.choices(b, k=len(b))) for _ in range(draws)
    )
    lo = diffs[int(math.floor((1 - level) / 2 * (draws - 1)))]
    hi = diffs[int(math.ceil((1 + level) / 2 * (draws - 1)))]
    return lo, hi


def blocks(curve: list[float], size: int) -> list[float]:
    """The means of consecutive ``size``-step blocks (the last may be shorter)."""
    return [fmean(curve[i : i + size]) for i in range(0, len(curve), size)]


def summaries(curve: list[float], last: int) -> dict[str, float]:
    """One run's figures: the mean of the last ``last`` steps and the area under the curve
    (the mean over all steps: the area per step, comparable across run lengths)."""
    return {"last": fmean(curve[-last:]), "auc": fmean(curve)}


def compare_curves(
    curves: dict[str, list[list[float]]], *, last: int, level: float = 0.95
) -> dict[str, Any]:
    """For ``curves[framework]`` (one curve per seed): each summary's per-seed values, their
    mean and spread per framework, and rlvr - TRL with Welch's and the bootstrap's intervals;
    ``agree`` when Welch's interval contains 0."""
    out: dict[str, Any] = {}
    for key in ("last", "auc"):
        values = {fw: [summaries(c, last)[key] for c in curves[fw]] for fw in FRAMEWORKS}
        w = welch(values["rlvr"], values["trl"], level)
        lo, hi = bootstrap(values["rlvr"], values["trl"], level=level)
        out[key] = {
            "values": values,
            "mean": {fw: fmean(v) for fw, v in values.items()},
            "sd": {fw: stdev(v) for fw, v in values.items()},
            "diff": w["diff"],
            "welch": [w["lo"], w["hi"]],
            "welch_df": w["df"],
            "bootstrap": [lo, hi],
            "width": w["hi"] - w["lo"],
            "agree": w["lo"] <= 0.0 <= w["hi"],
        }
    return out


# --------------------------------------------------------------------------- report


def block_table(curves: dict[str, list[list[float]]], size: int) -> list[str]:
    """Markdown rows: per block of steps, each framework's mean over seeds +- their sd."""
    per = {fw: [blocks(c, size) for c in curves[fw]] for fw in FRAMEWORKS}
    n = len(per["rlvr"][0])
    steps = len(curves["rlvr"][0])
    lines = ["| steps | rlvr mean ± sd | TRL mean ± sd | rlvr - TRL |", "|---|---:|---:|---:|"]
    for i in range(n):
        cells = {fw: [b[i] for b in per[fw]] for fw in FRAMEWORKS}
        m = {fw: fmean(v) for fw, v in cells.items()}
        s = {fw: stdev(v) for fw, v in cells.items()}
        lines.append(
            f"| {i * size + 1}-{min((i + 1) * size, steps)} | {m['rlvr']:.3f} ± {s['rlvr']:.3f} "
            f"| {m['trl']:.3f} ± {s['trl']:.3f} | {m['rlvr'] - m['trl']:+.3f} |"
        )
    return lines


def verdict_lines(metric: str, stats: dict[str, Any], last: int) -> list[str]:
    lines = []
    for key, what in (
        ("last", f"mean of the last {last} steps"),
        ("auc", "area (mean, all steps)"),
    ):
        s = stats[key]
        lines.append(
            f"- {metric}, {what}: rlvr {s['mean']['rlvr']:.3f} ± {s['sd']['rlvr']:.3f}, "
            f"TRL {s['mean']['trl']:.3f} ± {s['sd']['trl']:.3f}; rlvr - TRL {s['diff']:+.3f}, "
            f"95% CI Welch [{s['welch'][0]:+.3f}, {s['welch'][1]:+.3f}] (width "
            f"{s['width']:.3f}, df {s['welch_df']:.1f}), bootstrap [{s['bootstrap'][0]:+.3f}, "
            f"{s['bootstrap'][1]:+.3f}]: "
            + ("agree within noise" if s["agree"] else "DIFFER (the interval excludes 0)")
        )
    return lines


def plot(path: str, curves: dict[str, dict[str, list[list[float]]]], args: argparse.Namespace):
    """Mean curve +- sd over seeds per framework, one panel per metric (matplotlib: the plot
    extra)."""
    import matplotlib  # optional (the plot extra)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional (the plot extra)

    fig, axes = plt.subplots(1, len(METRICS), figsize=(5 * len(METRICS), 3.6))
    for ax, metric in zip(axes, METRICS, strict=True):
        for fw, color in zip(FRAMEWORKS, ("tab:blue", "tab:orange"), strict=True):
            runs = curves[metric][fw]
            steps = range(1, len(runs[0]) + 1)
            mean = [fmean(v) for v in zip(*runs, strict=True)]
            sd = [stdev(v) for v in zip(*runs, strict=True)]
            changed = ", ".join(f"{k.rpartition('.')[2]}={v}" for k, v in args.rlvr_set.items())
            label = "TRL 1.16" if fw == "trl" else f"rlvr {changed}".strip()
            ax.plot(steps, mean, color=color, label=f"{label} (mean of {len(runs)} seeds)")
            ax.fill_between(
                steps,
                [m - s for m, s in zip(mean, sd, strict=True)],
                [m + s for m, s in zip(mean, sd, strict=True)],
                color=color,
                alpha=0.2,
            )
        ax.set_title(metric)
        ax.set_xlabel("step")
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"tiny-arith GRPO, {args.prompts}x{args.generations} completions/step, "
        f"lr {args.learning_rate:g}; band: ± sd over seeds",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# --------------------------------------------------------------------------- driver


def run(args: argparse.Namespace) -> dict[str, Any]:
    reuse = getattr(args, "trl_from_run", None)
    trl_python = args.trl_python or ("" if reuse else vs_trl.ensure_trl_venv())
    pythons = {"rlvr": sys.executable, "trl": trl_python}
    curves: dict[str, dict[str, list[list[float]]]] = {
        m: {fw: [] for fw in FRAMEWORKS} for m in METRICS
    }
    lengths: dict[str, list[float]] = {fw: [] for fw in FRAMEWORKS}
    seconds: dict[str, list[float]] = {fw: [] for fw in FRAMEWORKS}
    prompt_tokens: dict[str, set[float]] = {fw: set() for fw in FRAMEWORKS}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model, data = write_task(root)
        if reuse:  # TRL's side of an earlier run with the same settings
            for m in METRICS:
                curves[m]["trl"] = reuse["curves"][m]["trl"]
            lengths["trl"] = reuse["mean_length"]["trl"]
            seconds["trl"] = reuse["seconds_per_step"]["trl"]
            prompt_tokens["trl"] = set(reuse.get("prompt_tokens", {}).get("trl", []))
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for fw in FRAMEWORKS[:1] if reuse else FRAMEWORKS:
                spec = curve_spec(args, model, data, root / f"{fw}-{seed}", seed)
                isolate = fw == "trl" and not args.trl_python
                t0 = time.perf_counter()
                raw = vs_trl.run_child(pythons[fw], fw, spec, isolate=isolate)
                if raw is None:
                    raise SystemExit(f"the {fw} run of seed {seed} failed: its error is above")
                steps = raw["steps"]
                if len(steps) != args.steps or any("reward" not in s for s in steps):
                    raise SystemExit(f"the {fw} run of seed {seed} logged no reward every step")
                for m in METRICS:
                    curves[m][fw].append([s[m] for s in steps])
                lengths[fw].append(
                    sum(s["completion_tokens"] for s in steps)
                    / max(sum(s["completions"] for s in steps), 1)
                )
                seconds[fw].append(sum(s["step"] for s in steps) / len(steps))
                prompt_tokens[fw].update(s["prompt_tokens"] for s in steps)
                print(
                    f"seed {seed} {fw}: {time.perf_counter() - t0:.0f} s; reward first 10 steps "
                    f"{fmean(curves['reward'][fw][-1][:10]):.3f}, last {args.last} "
                    f"{fmean(curves['reward'][fw][-1][-args.last :]):.3f}",
                    flush=True,
                )
    stats = {m: compare_curves(curves[m], last=args.last) for m in METRICS}
    changed = ", ".join(f"{k}={v}" for k, v in args.rlvr_set.items())
    report = [
        *([f"\nDELIBERATE MISMATCH: rlvr runs with {changed}"] if changed else []),
        *([f"TRL's curves: from {args.trl_from}"] if reuse else []),
        f"\n## {args.seeds} seeds ({args.first_seed}-{args.first_seed + args.seeds - 1}) x "
        f"{args.steps} steps per framework: {args.prompts} prompts x "
        f"{args.generations} completions of up to {args.max_completion_length} tokens, lr "
        f"{args.learning_rate:g} (warm-up {args.warmup_steps}), beta 0, {args.threads} thread(s)\n",
        "Summed reward (answer + format, 0-2), mean over seeds per block of steps:\n",
        *block_table(curves["reward"], args.block),
        "\nAnswer reward (fraction correct):\n",
        *block_table(curves["rewards/answer_reward"], args.block),
        "",
    ]
    for m in METRICS:
        report += verdict_lines(m, stats[m], args.last)
    report.append(
        f"- mean completion length (tokens): rlvr {fmean(lengths['rlvr']):.2f}, TRL "
        f"{fmean(lengths['trl']):.2f}; prompt tokens per step: rlvr "
        f"{sorted(prompt_tokens['rlvr'])}, TRL {sorted(prompt_tokens['trl']) or 'not recorded'}; "
        f"s/step: rlvr "
        f"{fmean(seconds['rlvr']):.3f}, TRL {fmean(seconds['trl']):.3f}"
    )
    print("\n".join(report), flush=True)
    if args.plot:
        plot(args.plot, curves, args)
    return {
        "settings": {k: v for k, v in vars(args).items() if k != "trl_from_run"},
        "curves": curves,
        "stats": stats,
        "mean_length": lengths,
        "seconds_per_step": seconds,
        "prompt_tokens": {fw: sorted(v) for fw, v in prompt_tokens.items()},
    }


def main() -> None:
    args = parse_args()
    results = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
