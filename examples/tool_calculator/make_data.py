"""Products for the SmolLM2 calculator recipe (docs/experiments/smollm2-calculator.md).

    python examples/tool_calculator/make_data.py 3x2     # -> examples/tool_calculator/data/3x2/

Questions "What is 437 * 58?" with an A-digit and a B-digit factor, gold the product. The
held-out split is disjoint from the training one by construction: a product goes to the test
pool when a hash of the product says so, so no held-out answer is the answer to a question
trained on (12 * 36 and 18 * 24 land in the same pool). Deterministic: same arguments, same
files.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent


def held_out(product: int, share: int) -> bool:
    """Whether ``product`` belongs to the test pool: one product in ``share``, by hash."""
    digest = hashlib.sha256(str(product).encode()).digest()
    return int.from_bytes(digest[:4], "big") % share == 0


def rows(a: int, b: int, n: int, test: bool, share: int, seed: int) -> list[dict[str, str]]:
    """``n`` distinct questions of the pool (``test`` or not), drawn with ``seed``."""
    rng = random.Random(seed)
    seen: set[tuple[int, int]] = set()
    out = []
    while len(out) < n:
        x = rng.randrange(10 ** (a - 1), 10**a)
        y = rng.randrange(10 ** (b - 1), 10**b)
        if (x, y) in seen or held_out(x * y, share) != test:
            continue
        seen.add((x, y))
        out.append({"question": f"What is {x} * {y}?", "answer": str(x * y)})
    return out


def best_constant(questions: list[dict[str, str]]) -> tuple[str, float]:
    """The answer a model that ignores the question would best give every time (the most
    frequent gold), and the share of ``questions`` it is right on: the floor of accuracy."""
    answer, count = collections.Counter(q["answer"] for q in questions).most_common(1)[0]
    return answer, count / len(questions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("digits", help="factor sizes, e.g. 3x2")
    parser.add_argument("--train", type=int, default=2000, help="training questions")
    parser.add_argument("--test", type=int, default=200, help="held-out questions")
    parser.add_argument("--share", type=int, default=10, help="one product in SHARE is held out")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    a, b = (int(d) for d in args.digits.lower().split("x"))
    out = HERE / "data" / f"{a}x{b}"
    out.mkdir(parents=True, exist_ok=True)
    for name, n, test in (("train", args.train, False), ("test", args.test, True)):
        made = rows(a, b, n, test, args.share, args.seed)
        with open(out / f"{name}.jsonl", "w") as f:
            for row in made:
                f.write(json.dumps(row) + "\n")
    answer, share = best_constant(made)
    print(f"{out}: {args.train} training and {args.test} held-out questions")
    print(f"best constant answer on the held-out ones: {answer}, right on {share:.1%}")


if __name__ == "__main__":
    main()
