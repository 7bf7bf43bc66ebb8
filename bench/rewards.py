"""Benchmark: completions scored per second by rlvr's ``answer`` reward vs a TRL-style loop.

The baseline calls math-verify serially in the caller's process, the way TRL's
``accuracy_reward`` does (parse the gold, parse the completion with a LaTeX extraction config,
``verify``). rlvr runs its ``answer`` reward in its worker pool. Both score the same
GSM8K-style completions (correct and wrong, in several answer styles); the accuracy each one
credits is printed too, since speed means little if correct answers score 0.

    python bench/rewards.py [--n 2000] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

from rlvr import Scorer, create_host, load_config
from rlvr.plugin import Sample

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "gsm8k" / "test.jsonl"
STYLES = [
    "<think>{work}</think>\n<answer>{ans}</answer>",
    "{work}\nThe answer is {ans}.",
    "{work}\n#### {ans}",
    "{work}\nSo the final answer is $\\boxed{{{ans}}}$.",
    "{work}\nA: {ans}",
]


def completions(n: int, seed: int = 0) -> list[tuple[str, dict, bool]]:
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    rng = random.Random(seed)
    out = []
    for i in range(n):
        row = rows[i % len(rows)]
        gold = row["answer"].split("####")[-1].strip().replace(",", "")
        correct = rng.random() < 0.5
        ans = gold if correct else str(int(float(gold)) + rng.randint(1, 9))
        work = row["answer"].split("####")[0].strip()
        out.append((rng.choice(STYLES).format(work=work, ans=ans), row, correct))
    return out


def trl_style(completion: str, gold: str) -> float | None:
    """TRL's ``accuracy_reward`` for one completion (math-verify, in-process)."""
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import LatexExtractionConfig, parse, verify

    gold_parsed = parse(gold, extraction_mode="first_match")
    if not gold_parsed:
        return None
    config = LatexExtractionConfig(
        normalization_config=NormalizationConfig(
            nits=False,
            malformed_operators=False,
            basic_latex=True,
            boxed="all",
            units=True,
        ),
        boxed_match_priority=0,
        try_extract_without_anchor=False,
    )
    answer_parsed = parse(completion, extraction_config=[config], extraction_mode="first_match")
    try:
        return float(verify(gold_parsed, answer_parsed))
    except Exception:
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    data = completions(args.n)
    truth = [c for _, _, c in data]

    start = time.perf_counter()
    baseline = [
        trl_style(text, "$" + row["answer"].split("####")[-1].strip() + "$")
        for text, row, _ in data
    ]
    t_base = time.perf_counter() - start

    host = create_host()
    config = load_config({"rewards": [{"name": "answer"}]}, host, require=("rewards",))
    samples = [Sample(completion=text, row=row) for text, row, _ in data]
    with Scorer.for_config(config, host, workers=args.workers) as scorer:
        scorer.score(samples[:8])  # workers up and warm, as during training
        start = time.perf_counter()
        ours = scorer.score(samples).per_reward["answer"]
        t_ours = time.perf_counter() - start

    def agreement(scores: list[float | None]) -> str:
        right = sum((s or 0) > 0.5 and t for s, t in zip(scores, truth, strict=True))
        wrong = sum((s or 0) > 0.5 and not t for s, t in zip(scores, truth, strict=True))
        return f"credits {right}/{sum(truth)} correct, {wrong} wrong"

    rate_base, rate_ours = args.n / t_base, args.n / t_ours
    print(f"{args.n} GSM8K-style completions, 5 answer styles, half correct")
    print(f"TRL-style serial math-verify : {rate_base:8.1f} /s  ({agreement(baseline)})")
    print(f"rlvr answer, {args.workers} workers      : {rate_ours:8.1f} /s  ({agreement(ours)})")
    print(f"speed ratio rlvr / TRL-style : {rate_ours / rate_base:8.2f}x")


if __name__ == "__main__":
    main()
