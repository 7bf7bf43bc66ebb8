"""The pass@k estimator: how likely ``k`` samples of a prompt hold a correct one, estimated from
``n >= k`` samples of which ``c`` were correct. Exact integer math, no tensors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


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


def mean_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> float:
    """pass@k averaged over prompts, ``counts`` being ``(n, c)`` per prompt."""
    if not counts:
        return math.nan
    return sum(pass_at_k(n, c, k) for n, c in counts) / len(counts)


__all__ = ["mean_pass_at_k", "pass_at_k"]
